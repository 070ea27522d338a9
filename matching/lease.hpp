// A lease: the contract a trade creates between a buyer and a pool's provider.
#pragma once

#include <cstdint>
#include <optional>

#include "matching/types.hpp"

namespace gpuex::matching {

struct Lease {
  LeaseId id;
  TradeId trade;            // the trade that created it (a split-off part keeps the original trade)
  LeaseId split_from;       // 0, or the lease this one was split from when a preemption took part of it
  AccountId buyer;
  AccountId provider;
  PoolId pool;
  MarketId market;
  OrderId buy_order;
  OrderId sell_order;
  Qty quantity;
  Seconds start;
  Seconds end;
  Price price;              // paid by the buyer, received by the provider, per GPU-hour
  Price list_price;
  std::int32_t green_discount_bps{0};
  bool interruptible{false};  // on a spot-tier pool: may be preempted; released pays seconds used
  LeaseStatus status{LeaseStatus::reserved};
  std::optional<Seconds> preempted_at;
  std::optional<Seconds> ends_at;      // when access ends: end, or earlier after preemption/release
  Micros billed{0};   // charged once the lease has ended (completed, released, end of notice)
  Micros owed{0};     // still to be charged: the projected bill while the lease runs, 0 once billed
  Bucket bucket;      // of its trade
  bool ended{false};  // access is over and the bill is final (completed, released, notice over)
  // The ask that sold it, as preemption needs it even after that ask ended.
  Seconds ask_window_start;
  Seconds ask_window_end;
  Price ask_list_price;
  Qty ask_min_chunk{1};
  Seconds ask_min_duration{0};
  bool ask_withdrawn{false};  // the ask ended cancelled or expired: only an open or filled one lets it be preempted
  bool operator==(const Lease&) const = default;
};

}  // namespace gpuex::matching
