// An order (bid or ask) with its full state, as the server persists it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "matching/steps.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

// Optional constraints of a bid on the pools it may buy from. Empty / unset = no constraint.
struct BidConstraints {
  std::vector<Tier> tiers;
  std::vector<std::string> regions;
  bool nvlink{false};  // true: only pools with NVLink
  std::optional<Fabric> min_fabric;
  std::optional<std::int32_t> min_fabric_gbps;
  std::optional<std::int32_t> min_sla_pct_x1000;
  bool green_only{false};  // verified, unexpired green tier (green or green_plus)
  std::optional<std::int32_t> max_pue_x1000;              // on verified values only
  std::optional<std::int32_t> min_renewable_pct_x100;     // on verified values only
  std::optional<std::int32_t> max_carbon_g_per_kwh_x100;  // on verified values only
  bool single_pool{false};     // all GPUs from one pool (ioc/fok only)
  bool interruptible{false};   // may land on spot-tier pools and be preempted there
  bool operator==(const BidConstraints&) const = default;

  // Attribute constraints keep a bid out of the L2 levels (not interruptible or min_chunk).
  bool has_attribute_constraints() const;
};

// The body of a PlaceOrder command (API.md "Placing an order").
struct OrderRequest {
  Side side{Side::buy};
  std::string client_order_id;  // empty: none
  MarketId market;              // buy; a sell's market is its pool's
  PoolId pool;                  // sell
  Price price;                  // limit (buy) or list price (sell), micro-dollars per GPU-hour
  Qty quantity;
  std::optional<Seconds> start;     // fixed window (buy) or offered window (sell) [start, end)
  std::optional<Seconds> end;
  std::optional<Seconds> duration;  // buy: spot/duration bid instead of a window
  BidConstraints constraints;       // buy
  Seconds min_duration;             // sell: shortest sub-window a buyer may take (0 = any)
  Qty min_chunk{1};                 // lot size
  TimeInForce time_in_force{TimeInForce::gtc};
  std::optional<Seconds> expire_at;  // gtd
  bool post_only{false};
  StpMode stp{StpMode::cancel_newest};
  bool operator==(const OrderRequest&) const = default;
};

// Stable 64-bit FNV-1a hash of a PlaceOrder body (every field), for idempotency: the engine compares it
// for client_order_ids it still indexes; the server may store it for older ones.
std::uint64_t body_hash(const OrderRequest& request);

struct Order {
  OrderId id;
  AccountId account;
  OrderRequest request;    // as sent (the constraints, window and options the client chose)
  MarketId market;         // resolved (a sell's pool's market)
  Seconds window_start;    // fixed bid: start; sell: max(start, now at entry); duration bid: 0
  Seconds window_end;      // fixed bid / sell: end; duration bid: 0
  Price effective_price;   // sell: list price less the pool's green discount, down to the tick; buy: price
  std::int32_t green_discount_bps{0};  // sell
  OrderStatus status{OrderStatus::open};
  Reason reason{Reason::none};
  Bucket bucket;           // the book view it is shown in (see engine.hpp)
  Seq priority{0};         // time priority: seq of placement, or of the amend that changed the price
  Seconds created_at;
  Seconds updated_at;
  // Buy: GPUs. filled + remaining = quantity.
  Qty filled;
  Qty remaining;
  // Sell: GPU-seconds (divide by 3600 for GPU-hours).
  // filled + lapsed + free + cancelled = total = quantity x (window_end - window_start) at entry.
  // lapsed: free capacity whose time has passed (before now), strictly the past. When a sell ends for any
  // reason (filled with unsellable remnants, expired by expire_at or window end, cancelled, rejected),
  // its free capacity still ahead (from max(now, window_start)) is withdrawn and added to cancelled;
  // free becomes 0. An amend that lowers quantity adds the cut x remaining window to cancelled.
  std::int64_t total_gpu_seconds{0};
  std::int64_t filled_gpu_seconds{0};
  std::int64_t lapsed_gpu_seconds{0};
  std::int64_t free_gpu_seconds{0};       // free GPU-seconds still ahead (remaining_gpu_hours x 3600)
  std::int64_t cancelled_gpu_seconds{0};
  SmallSteps free;  // sell: GPUs offered over time, history included (up to its end once it ended: the wire shows none)
  // FNV-1a of the PlaceOrder body as first sent: a repeat of the client_order_id with the same body is a
  // duplicate. Amends change `request` but not this. 0 for an order without a client_order_id (nothing
  // compares it; states saved before 2026-11-30 may hold a hash there, which restore keeps as it is).
  std::uint64_t body_hash{0};
  bool operator==(const Order&) const = default;

  bool is_buy() const { return request.side == Side::buy; }
  bool is_sell() const { return request.side == Side::sell; }
  bool is_duration_bid() const { return is_buy() && request.duration.has_value(); }
  bool is_open() const { return !is_terminal(status); }
};

}  // namespace gpuex::matching
