// A small, obviously-correct reference matcher: the market rules of DESIGN.md §4 applied by brute force,
// for the randomized differential test against the fast engine (same apply() contract, same events).
//
// It shares no logic with matching/: it speaks the engine's public types (commands, events, orders, leases,
// pools) because the test compares events, but its free capacity, money, green tiers and month buckets are
// its own (reference_rules.hpp). The one field of those types it leaves alone is Order::free (the engine's
// step-function class): the free capacity of a sell in each event it emits is reported beside the events,
// by event_free(), and the test compares it with the engine's.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "matching/engine.hpp"
#include "reference_rules.hpp"

namespace gpuex::matching::test {

class ReferenceMatcher {
 public:
  explicit ReferenceMatcher(EngineConfig config);

  // Same contract as Engine::apply: appends this command's events in the order documented in engine.hpp.
  void apply(const Command& cmd, EventSink& out);

  // Triage only (GPUEX_KNOWN_BUGS=1 in the differential test): mimic the engine's known bug that a lease made by a
  // preemption is not told when the ask that sold the GPUs ends, so a soak run can look past it for others.
  void mimic_unlinked_preemption_leases(bool on) { mimic_unlinked_ = on; }

  // The free capacity of the sell order in each event of the last apply() that carries one, by index in the
  // sink (the events themselves carry an empty Order::free).
  const std::vector<std::pair<std::size_t, std::vector<ref::Segment>>>& event_free() const { return event_free_; }
  // An order's free capacity now (empty for bids and for orders it does not know).
  std::vector<ref::Segment> free_pieces(OrderId id) const { return free_of(id).pieces(); }

  // As Engine::committed_through: client_order_ids of orders that ended are forgotten (the store answers them).
  void committed_through(Seq seq);

  // Read-only views of the whole state, for invariant checks.
  const std::vector<Order>& orders() const { return orders_; }  // every order ever placed, terminal included
  const std::vector<Lease>& leases() const { return leases_; }  // every lease ever made, ended included
  const std::vector<Pool>& pools() const { return pools_; }
  Seconds now() const { return now_; }
  // GPUs the pool has committed at instant t: open asks' free capacity plus the leases holding GPUs then.
  std::int64_t committed_at(PoolId pool, Seconds t) const;
  // Bid and ask are eligible for each other now, ignoring price (DESIGN.md §4 "Eligibility").
  bool eligible(const Order& bid, const Order& ask) const;
  Depth depth(const MarketId& market, Bucket bucket) const;
  // How many leases an open bid could preempt now if it were not post_only (for the test's coverage counts).
  std::size_t preemptable_unless_post_only(OrderId bid) const;

 private:
  struct View {
    std::map<Price, Qty> bids;
    std::map<Price, Qty> asks;
    ConstrainedBids constrained;
    bool operator==(const View&) const = default;
  };
  using ViewKey = std::pair<MarketId, Bucket>;

  // Lookups.
  Pool* pool(PoolId id);
  const Pool* pool(PoolId id) const;
  Order* order(OrderId id);
  Lease* lease(LeaseId id);
  const MarketSpec* market(const MarketId& id) const;
  Price tick(const MarketId& id) const;
  const Limits& limits_of(AccountId a) const;

  // Time step (engine.hpp 1a-1d) and matching.
  void time_step(EventSink& out);
  void expire_orders(EventSink& out);
  void advance_leases(EventSink& out);
  void expire_verifications(EventSink& out);
  void match_woken_asks(EventSink& out);
  void reclassify(Pool& p, bool force_event, EventSink& out);

  // Command bodies.
  void place(const Command& cmd, const OrderRequest& r, EventSink& out);
  void cancel(const Command& cmd, OrderId id, EventSink& out);
  void cancel_all(const Command& cmd, const std::optional<MarketId>& m, EventSink& out);
  void amend(const Command& cmd, const Amend& a, EventSink& out);
  void change_order(Order& o, const Amend& a);
  void release(const Command& cmd, LeaseId id, EventSink& out);

  // Matching an incoming order (engine.hpp 3): a new order, a woken or re-priced ask, an amended order.
  // The walks return 0 (done), 1 (an all-or-none walk met an own order), 2 (STP stopped the incoming order).
  void match_incoming(std::size_t index, EventSink& out);
  int walk_bid(std::size_t bid_index, bool abort_on_self, std::optional<PoolId> only_pool, EventSink& out);
  int walk_ask(std::size_t ask_index, bool abort_on_self, EventSink& out);
  void preempt_for(std::size_t bid_index, EventSink& out);
  std::vector<std::size_t> preemptable_leases(const Order& bid) const;
  bool preemption_window(const Order& bid, Seconds& start, Seconds& end) const;
  Price preemption_price(const Lease& l) const;
  Price preemption_list_price(const Lease& l) const;
  std::optional<PoolId> single_pool_choice(const Order& bid, bool& met_self) const;

  // Order helpers.
  Seconds bid_start(const Order& b) const;
  Seconds bid_end(const Order& b) const;
  bool pool_satisfies(const Pool& p, const Order& bid) const;
  std::int64_t lot(const Order& bid, const Order& ask) const;
  Qty fill_qty(const Order& bid, const Order& ask) const;
  bool crosses(const Order& bid, const Order& ask) const { return bid.request.price >= ask.effective_price; }
  bool ask_has_piece(const Order& ask) const { return ask_has_piece(ask, free_of(ask.id)); }
  bool ask_has_piece(const Order& ask, const ref::FreeCapacity& free) const;
  const ref::FreeCapacity& free_of(OrderId id) const;
  bool verified_now(const Pool& p) const;
  ref::GreenClass pool_class(const Pool& p) const;
  // Open notional of an account x 3600 (micro-dollar GPU-seconds), leaving one bid out (0: none).
  Int128 notional_x3600(AccountId a, OrderId except) const;
  template <class E>
  void emit(EventSink& out, E event);
  bool would_take(const Order& o) const;
  Bucket bucket_of(const Order& o) const;
  void refresh(Order& o) const;
  void end_ask(Order& a);
  void finish_order(Order& o, OrderStatus s, Reason r);
  std::int32_t pool_discount(const Pool& p) const;
  GreenTier pool_green(const Pool& p) const;
  bool market_halted(const MarketId& m) const { return halted_.count(m) > 0; }
  Order make_order(const Command& cmd, const OrderRequest& r) const;
  Reason engine_reject(const Command& cmd, const Order& o) const;

  // Trades and leases.
  void trade(std::size_t bid_index, std::size_t ask_index, Qty q, Price price, Side taker, EventSink& out);
  Micros lease_bill(const Lease& l, Seconds used_end) const;

  // Book views.
  std::map<ViewKey, View> compute_views() const;
  void publish_views(EventSink& out);

  EngineConfig config_;
  GreenPolicy policy_;
  Seconds now_{0};
  Seq seq_{0};  // the seq of the command being applied
  std::int64_t next_trade_{1};
  std::int64_t next_lease_{1};
  std::vector<Pool> pools_;
  std::vector<Order> orders_;
  std::vector<Lease> leases_;
  std::map<AccountId, Limits> limits_;
  std::set<MarketId> halted_;
  std::set<PoolId> verification_pending_;
  std::set<LeaseId> preemption_leases_;  // made by a preemption (for the triage mimic only)
  bool mimic_unlinked_{false};  // verified pools whose expiry has not been applied yet
  // client_order_id -> the order and the body first sent (amends change the order's request, not this).
  std::map<std::pair<AccountId, std::string>, std::pair<OrderId, OrderRequest>> client_ids_;
  std::map<ViewKey, View> published_;
  std::map<ViewKey, std::uint64_t> view_seq_;
  std::map<OrderId, ref::FreeCapacity> free_;  // sells' free GPUs over time
  std::vector<std::pair<std::size_t, std::vector<ref::Segment>>> event_free_;
};

}  // namespace gpuex::matching::test
