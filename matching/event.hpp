// Events: the only outputs of the engine. Values, comparable and printable; their order is documented
// in engine.hpp and is part of the contract (a reference matcher must produce the same stream).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

#include "matching/green_policy.hpp"
#include "matching/lease.hpp"
#include "matching/limits.hpp"
#include "matching/order.hpp"
#include "matching/pool.hpp"
#include "matching/trade.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

// The order passed the engine's checks and exists (HTTP 201 after commit). Its state before matching.
struct OrderAccepted {
  Order order;
  bool operator==(const OrderAccepted&) const = default;
};

// An engine reject (HTTP 422): the order is stored as `rejected` with `reason`; nothing else happened.
struct OrderRejected {
  Order order;
  bool operator==(const OrderRejected&) const = default;
};

// A non-terminal change of an open order (fill, amend, re-price, bucket change is NOT reported here).
struct OrderUpdated {
  Order order;
  bool operator==(const OrderUpdated&) const = default;
};

// The order reached a terminal state: filled, cancelled, expired, or rejected by a matching outcome
// (`would_take`, `self_trade` before any fill) after it was accepted.
struct OrderDone {
  Order order;
  bool operator==(const OrderDone&) const = default;
};

// A repeat of an open (or not yet committed) order's client_order_id with the same body: the original
// order, unchanged. Nothing else happened.
struct OrderDuplicate {
  Order order;
  bool operator==(const OrderDuplicate&) const = default;
};

struct TradeEvent {
  Trade trade;
  bool operator==(const TradeEvent&) const = default;
};

// A lease was created or changed state, quantity or bill: the full lease.
struct LeaseChanged {
  Lease lease;
  bool operator==(const LeaseChanged&) const = default;
};

// Private notice to the buyer of a preempted lease.
struct LeasePreempted {
  LeaseId lease;
  AccountId buyer;
  Qty quantity;
  Seconds preempted_at;
  Seconds ends_at;
  TradeId by_trade;
  bool operator==(const LeasePreempted&) const = default;
};

struct LevelChange {
  Side side{Side::buy};
  Price price;
  Qty quantity;  // new total at the level; 0 removes it
  bool operator==(const LevelChange&) const = default;
};

// A BookDelta's level changes, in order: a command changes one or two levels of a view, which are kept
// inline (no heap vector per delta); a third and later move them all to `more`. Read as a range.
class LevelChanges {
 public:
  LevelChanges() = default;
  LevelChanges(std::initializer_list<LevelChange> changes) {
    for (const LevelChange& c : changes) push_back(c);
  }
  void push_back(const LevelChange& c) {
    if (more_.empty() && n_ < kInline) {
      inline_[n_++] = c;
      return;
    }
    if (more_.empty()) more_.assign(inline_.begin(), inline_.begin() + static_cast<std::ptrdiff_t>(n_));
    more_.push_back(c);
  }
  const LevelChange* begin() const { return more_.empty() ? inline_.data() : more_.data(); }
  const LevelChange* end() const { return begin() + size(); }
  std::size_t size() const { return more_.empty() ? n_ : more_.size(); }
  bool empty() const { return size() == 0; }
  const LevelChange& operator[](std::size_t i) const { return begin()[i]; }
  bool operator==(const LevelChanges& o) const { return std::equal(begin(), end(), o.begin(), o.end()); }

 private:
  static constexpr std::size_t kInline = 2;
  std::array<LevelChange, kInline> inline_{};
  std::size_t n_{0};                 // in inline_, while more_ is empty
  std::vector<LevelChange> more_;  // every change, once there were more than kInline
};

struct ConstrainedBids {
  std::int64_t orders{0};
  Qty gpus;
  bool operator==(const ConstrainedBids&) const = default;
};

// One published delta of one (market, bucket) view: every level the command changed there, buys first
// (price descending) then sells (price ascending), and the view's constrained-bid count after it.
struct BookDelta {
  MarketId market;
  Bucket bucket;
  std::uint64_t sequence{0};  // the view's sequence after this delta (previous + 1)
  LevelChanges changes;
  ConstrainedBids constrained_bids;
  bool operator==(const BookDelta&) const = default;
};

// A pool was added, resized, retired, verified, or its green tier changed.
struct PoolChanged {
  Pool pool;
  bool operator==(const PoolChanged&) const = default;
};

struct MarketHaltChanged {
  MarketId market;
  bool halted{false};
  bool operator==(const MarketHaltChanged&) const = default;
};

struct LimitsChanged {
  AccountId account;
  Limits limits;
  bool operator==(const LimitsChanged&) const = default;
};

struct GreenPolicyChanged {
  GreenPolicy policy;
  bool operator==(const GreenPolicyChanged&) const = default;
};

// A command other than a valid PlaceOrder had no effect (unknown or foreign id, pool_busy, an amend
// that breaks a rule, idempotency_conflict, ...). `subject` is the order, pool or lease id it named.
struct CommandRejected {
  Seq seq{0};
  Reason reason{Reason::none};
  std::int64_t subject{0};
  bool operator==(const CommandRejected&) const = default;
};

using Event = std::variant<OrderAccepted, OrderRejected, OrderUpdated, OrderDone, OrderDuplicate, TradeEvent,
                           LeaseChanged, LeasePreempted, BookDelta, PoolChanged, MarketHaltChanged,
                           LimitsChanged, GreenPolicyChanged, CommandRejected>;

using EventSink = std::vector<Event>;  // apply() appends to it

std::string to_string(const Order&);
std::string to_string(const Lease&);
std::string to_string(const Trade&);
std::string to_string(const Pool&);
std::string to_string(const Event&);

}  // namespace gpuex::matching
