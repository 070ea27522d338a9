// A trade print: one fill between a bid and an ask (or a preempted lease), creating one lease.
#pragma once

#include <cstdint>
#include <string>

#include "matching/types.hpp"

namespace gpuex::matching {

struct Trade {
  TradeId id;
  MarketId market;
  Bucket bucket;            // spot if the window starts within the spot horizon of `time`, else its month
  Seconds time;             // the command's time
  OrderId buy_order;
  OrderId sell_order;       // the ask (for a preemption: the ask that sold the preempted lease)
  AccountId buyer;
  AccountId seller;         // the pool's provider
  PoolId pool;
  LeaseId lease;            // the lease this trade creates
  Qty quantity;
  Seconds start;
  Seconds end;
  Price price;              // paid by the buyer and received by the provider
  Price list_price;         // the ask's list price
  std::int32_t green_discount_bps{0};
  Tier tier{Tier::bare_metal};
  std::string region;
  GreenTier green_tier{GreenTier::none};
  bool preemption{false};
  LeaseId preempted_lease;  // 0 unless preemption
  Side taker{Side::buy};    // the incoming side; the other side is the maker
  bool operator==(const Trade&) const = default;

  std::int64_t gpu_seconds() const { return quantity.value * (end - start).value; }
};

}  // namespace gpuex::matching
