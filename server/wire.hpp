// The wire form (API.md) of the market's values: JSON requests into matching types, matching types
// into JSON responses. Validation that needs no market state happens here and becomes a 400.
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "matching/engine.hpp"
#include "matching/lease.hpp"
#include "matching/order.hpp"
#include "matching/pool.hpp"
#include "matching/trade.hpp"
#include "server/json_fields.hpp"

namespace gpuex::wire {

// Limits on what a request may ask for (every input has a limit).
inline constexpr std::int64_t kMaxPriceMicros = 10'000'000'000;   // USD 10,000 per GPU-hour
inline constexpr std::int64_t kMaxQuantity = 100'000;              // GPUs in one order
inline constexpr std::int64_t kMaxWindowSeconds = 2 * 366 * 86400; // an order's window: two years
inline constexpr std::int64_t kMinWindowSeconds = 60;  // and a minute (a window as sent, or a duration)
inline constexpr std::int64_t kMaxNodes = 100'000;
inline constexpr std::int64_t kMaxGpusPerNode = 64;

// POST /v1/orders body -> OrderRequest. Field errors are recorded in `fields` (call finish()).
matching::OrderRequest read_order_request(JsonFields& fields);
// POST /v1/pools body -> PoolSpec.
matching::PoolSpec read_pool_spec(JsonFields& fields);

// The request bodies that read_order_request / read_pool_spec read back into equal values (the
// command log stores commands in this form).
boost::json::object order_request_body(const matching::OrderRequest& request);
boost::json::object pool_spec_body(const matching::PoolSpec& spec);

boost::json::object order_json(const matching::Order& order);
// `verified` is whether the verification holds at `now` (it lapses at verified_until).
boost::json::object pool_json(const matching::Pool& pool, matching::Seconds now);
// A lease as `account` sees it (role buyer or provider).
boost::json::object lease_json(const matching::Lease& lease, matching::AccountId account);
// A trade as one side's fill.
boost::json::object fill_json(const matching::Trade& trade, matching::Side side);
// A public trade print.
boost::json::object print_json(const matching::Trade& trade);

std::string time_string(matching::Seconds t);
std::string price_string(matching::Price p);

// "spot" or a month "2027-01" -> the book bucket; nullopt for anything else.
std::optional<matching::Bucket> parse_bucket(std::string_view text);
// Book levels as [["2.0500", 16], ...] and the constrained-bid count as {orders, gpus}.
boost::json::array levels_json(const std::vector<matching::Level>& levels);
boost::json::object constrained_json(const matching::ConstrainedBids& constrained);

}  // namespace gpuex::wire
