// The matching engine: every market's books, pools and leases, changed only by apply(Command).
//
// Pure and deterministic: no I/O, clock, threads or randomness. The same commands give the same events,
// byte for byte, and the same digest().
//
// Ids. An order's id is the seq of the PlaceOrder command that created it (rejected orders included);
// a pool's id is the seq of its AddPool. Trade and lease ids come from counters that are part of the
// state (the first is 1); a trade's lease gets the next lease id, and a preemption that takes part of a
// lease splits the untouched rest off into a new lease (next lease id, `split_from` = the original).
//
// Time. The engine keeps `now` = the latest command time seen (an earlier stamp counts as that time).
// Everything due at or before `now` is applied as of `now` (no intermediate instants are simulated).
//
// Event order of one apply(cmd) (a reference matcher must produce the same stream):
//  1. Time step.
//   a. Expiries in order id order, OrderDone(expired, reason expired): gtd with expire_at <= now; fixed-
//      window bids whose start is past (window_start < now); asks whose window ended (window_end <= now).
//   b. Leases in lease id order, one LeaseChanged each with its new state: reserved -> active when
//      start <= now, -> completed when end <= now (billed), a preemption notice over when ends_at <= now
//      (billed, ended; status stays preempted).
//   c. Verification expiries (verified_until <= now) in pool id order: PoolChanged, then OrderUpdated for
//      each open ask of the pool whose effective price or discount changed, in order id order.
//   d. Time-driven matching (not in halted markets): the asks that time can bring together with resting
//      bids (those re-priced in c, those whose window start or a step-up of free capacity arrived), in
//      ask priority (effective price ascending, then priority, then id), each matched as an incoming
//      order (3). A post_only one that would trade is cancelled instead (OrderDone, would_take).
//      Equivalently: every open ask of every non-halted market, in that order, that crosses a resting
//      bid it is eligible with; the engine only wakes the asks for which this can be true.
//  2. The command's own events:
//   PlaceOrder: OrderDuplicate | CommandRejected(idempotency_conflict) | OrderRejected |
//               OrderAccepted then matching (3). Matching outcomes end with OrderDone: rejected
//               (would_take: a post_only that would trade, checked before STP; self_trade: STP
//               stopped it before any fill), cancelled (the unfilled rest of ioc/fok, reason none;
//               STP after some fills, self_trade), expired (a gtd whose expire_at is not after now).
//   Cancel: OrderDone(cancelled) | CommandRejected.  CancelAll: OrderDone per open order, id order.
//   Amend: OrderUpdated (the amended order), then, if its new price crosses, matching (3) | CommandRejected.
//   ReleaseLease: LeaseChanged | CommandRejected.
//   AddPool, ResizePool, RetirePool: PoolChanged | CommandRejected.
//   VerifyPool: PoolChanged, OrderUpdated per re-priced ask (id order), then matching as in 1d of every
//               open ask of the pool (verified values can make constrained bids eligible).
//   SetGreenPolicy: GreenPolicyChanged; per pool whose tier or discount changed (id order): PoolChanged,
//               OrderUpdated per re-priced ask; then matching as in 1d of every open ask of those pools.
//   HaltMarket: MarketHaltChanged; a resume then matches as in 1d every open ask of that market.
//   SetLimits: LimitsChanged.  Tick: nothing more.
//  3. Matching an incoming order (also a woken or re-priced ask, or a bid whose price was amended).
//     Per fill, in priority order: TradeEvent; LeaseChanged (the new lease); for a preemption
//     LeaseChanged (split-off rest, if any), LeaseChanged (the preempted lease), LeasePreempted; then
//     the resting order's OrderUpdated or OrderDone (none for a preemption). A resting order cancelled
//     by self-trade prevention gives OrderDone(cancelled, self_trade) where the walk meets it. Last,
//     the incoming order's own state: OrderDone if it ended, else OrderUpdated if it changed.
//  4. BookDelta per (market, bucket) view that changed, in (market, bucket) order.
//
// Book views. A bid's bucket: spot for a duration bid or a window starting within the spot horizon
// (start - now <= 900 s), else the month of its start. An ask's: spot once its window started, else the
// month of its start. Buckets move with time; that shows only in BookDelta. A sell's level quantity is
// min free over [ref, ref + max(min_duration, 1 s)), ref = max(now, window_start), rounded down to its
// lot (0 if that interval passes its end). Bids with attribute constraints are counted apart.
//
// Rules where DESIGN.md is silent (docs/market-rules.md explains them for users):
//  - Validation order of a PlaceOrder: invalid_field, not_found (market, or a pool that is unknown,
//    retired or another account's), market_halted, off_tick, quantity_not_multiple_of_chunk,
//    window_in_past, exposure_limit, insufficient_pool_capacity. Idempotency is checked before all.
//  - Eligibility of bid b and ask a at now: same market; a's pool satisfies b's constraints (spot-tier
//    pools only for interruptible bids; energy constraints and green_only on verified, unexpired values);
//    the window W (fixed [start, end), duration [now, now + duration)) lies in [max(a.window_start, now),
//    a.window_end) and is at least a's min_duration; the fill = min(b.remaining, min free of a over W)
//    rounded down to lcm(chunks) is > 0. Crossing: b.price >= a.effective_price.
//  - STP: the incoming order's mode decides, by role as DESIGN.md defines it: cancel_newest cancels the
//    incoming order (also a woken or re-priced ask, even if it is older), cancel_oldest the resting one,
//    cancel_both both. A resting order cancelled by STP is cancelled (self_trade); the incoming order is
//    rejected (self_trade) only when it is being placed and has no fill, else cancelled (self_trade).
//  - A sell's fok: all-or-none means the walk must leave it with no sellable piece (it would be filled).
//  - Amend: quantity may only go down (> filled for bids; for sells the cut must be free over the rest of
//    the window and leave a piece the ask can still sell — nothing left to sell is a cancel); an amend that
//    changes nothing still answers OrderUpdated; the status never changes by an amend alone. A post_only
//    order whose new price would trade: rejected (would_take) and left unchanged. A new price re-matches
//    the order as incoming (3).
//  - Preemption: only at the placement of an interruptible, non-single_pool, non-post_only bid (or an amend
//    of its price), after free capacity. Candidates: leases on spot-tier pools of the market whose pool
//    satisfies the bid, in state reserved or active, price < bid price, whose buyer and provider are not
//    the bidding account, whose selling ask is open or filled (not cancelled or expired), with the new
//    window W' inside the ask's clipped window, at least the ask's min_duration long, and inside
//    [max(lease.start, now + notice), lease.end) (so the freed GPUs cover it). W' = [now + notice, +
//    duration) for a duration bid; a fixed window preempts only if its start >= now + notice, W' = the
//    window. Price = max(ask effective price, lease price + tick) <= bid price, the ask's list price being
//    its current one if open, else the one it ended with, under the pool's current discount. Order: lease
//    price, then lease id. Quantity: min(need, lease GPUs) down to lcm(bid chunk, ask chunk). The preempted
//    lease keeps its id and the GPUs taken (status preempted, ends_at = now + notice, owed = seconds used);
//    an untouched rest is split off into a new lease.
//  - Lease billing: firm: the whole window, whatever happens; interruptible (spot-tier pool) released
//    by its buyer: max(seconds used, min(min_bill, window)); preempted: seconds used up to ends_at.
//    `owed` is the projected bill while the lease runs, `billed` the final one once it ended.
//
// Indexing. Orders are found by id in a hash map (cancel and amend never scan a price level). Asks rest in
// their pool as compact entries in two arrays (price, hull and longest run of free lots, min piece; ids),
// and those a duration bid can use now (started, GPUs free now) also in a set in (effective price,
// priority) order; the market lists the pools with resting asks, with bounds of their prices and free runs.
// An incoming fixed-window bid tests the slots of the pools not skipped by those bounds and visits the
// fitting asks of pools that satisfy its constraints from a heap in priority order; a duration bid merges
// the spot sets of those pools, skipping asks whose window cannot hold it (book keys carry the window).
// Bids rest in groups of equal constraints (regions set aside), per group in a set per region they name (or
// one for no region), fixed-window and duration bids apart, in (price desc, priority) order; an incoming
// ask walks a merge over the groups its pool satisfies, in its pool's region (each set's head skips bids
// out of its window), and drops duration bids once it has nothing free now. A pool's leases are kept in
// (price, id) order for preemption. Time events (expiries, starts, steps of free capacity, lease
// transitions, verification expiries) sit in a min-heap, so the time step is proportional to what happens.
// Per pool: the step function of its commitments (asks' free capacity + leases) for the no-overselling
// check.
//
// Restore. The state is fully described by EngineState (pools, open orders, live leases, counters,
// limits, halts, policy, view sequences); snapshot() and restore() round-trip it, and the digest of a
// restored engine equals the original's. The orders that ended but whose client_order_ids the engine
// still answers (until committed_through) travel with it too, outside the digest, so that a restored
// engine answers a later repeat of one exactly as the original does.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "matching/command.hpp"
#include "matching/event.hpp"
#include "matching/green_policy.hpp"
#include "matching/lease.hpp"
#include "matching/limits.hpp"
#include "matching/order.hpp"
#include "matching/pool.hpp"
#include "matching/steps.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

struct MarketSpec {
  MarketId id;
  Price tick{100};                       // 0.0001 USD per GPU-hour
  std::int32_t perf_factor_x1000{1000};  // dense BF16 TFLOPS relative to H100 SXM
  bool operator==(const MarketSpec&) const = default;
};

struct EngineConfig {
  std::vector<MarketSpec> markets;
  GreenPolicy policy = GreenPolicy::defaults();
  Limits default_limits;              // for accounts without SetLimits
  Seconds preempt_notice{120};
  Seconds min_bill{3600};             // interruptible lease released by its buyer pays at least this
  Seconds spot_horizon{900};          // a window starting within this of now is spot
};

struct Level {
  Price price;
  Qty quantity;
  bool operator==(const Level&) const = default;
};

struct Depth {
  std::uint64_t sequence{0};
  std::vector<Level> bids;  // price descending
  std::vector<Level> asks;  // effective price ascending
  ConstrainedBids constrained_bids;
  bool operator==(const Depth&) const = default;
};

// A pool's GPUs over time: held by leases, offered by open asks; the rest is unallocated.
struct PoolCapacity {
  Qty gpus;
  Steps leased;
  Steps offered;
  Steps unallocated;
};

// One fill a buy order would get now (POST /v1/quote): no self-trade prevention, no limits, no change.
struct QuoteFill {
  PoolId pool;
  OrderId sell_order;
  Qty quantity;
  Seconds start;
  Seconds end;
  Price price;
  Price list_price;
  std::int32_t green_discount_bps{0};
  bool preemption{false};
  bool operator==(const QuoteFill&) const = default;
};

struct ViewSequence {
  MarketId market;
  Bucket bucket;
  std::uint64_t sequence{0};
  bool operator==(const ViewSequence&) const = default;
};

// An order that ended whose client_order_id the engine still answers repeats of (see committed_through).
struct FinishedOrder {
  Order order;
  std::uint64_t body_hash{0};
  Seq done_seq{0};  // the command that ended it
  bool operator==(const FinishedOrder&) const = default;
};

// Everything recovery needs to rebuild an equal engine.
struct EngineState {
  Seq last_seq{0};
  Seconds now;
  std::int64_t next_trade_id{1};
  std::int64_t next_lease_id{1};
  GreenPolicy policy;
  std::vector<Pool> pools;                  // retired ones included
  std::vector<Order> open_orders;
  std::vector<Lease> leases;                // not yet ended
  std::vector<std::pair<AccountId, Limits>> limits;
  std::vector<MarketId> halted_markets;
  std::vector<ViewSequence> view_sequences;
  std::vector<FinishedOrder> finished;      // not in the digest: committed_through() forgets them
  bool operator==(const EngineState&) const = default;
};

class Engine {
 public:
  explicit Engine(EngineConfig config);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The only way state changes. Appends this command's events to `out`.
  void apply(const Command& cmd, EventSink& out);

  // Queries (read-only).
  Depth depth(const MarketId& market, Bucket bucket, int levels) const;
  // Open orders only; terminal ones live in the store. A sell's lapsed/free GPU-seconds here are as of
  // its last event; open_orders() and snapshot() bring them to now(). Pointers are valid until the next
  // apply(). The engine keeps open orders in a compact form: order() builds the Order it points to (in a
  // cache the next apply() clears), so it is not safe to call from two threads at once.
  const Order* order(OrderId id) const;
  // The open order as a read shows it now: a sell's lapsed/free GPU-seconds brought to now() and its
  // free steps from now on (the past ones are lapsed).
  std::optional<Order> order_now(OrderId id) const;
  std::size_t live_pools(AccountId provider) const;  // the provider's pools not retired
  std::vector<Order> open_orders(AccountId account, const std::optional<MarketId>& market = {}) const;
  // Leases that have not ended; like order(), the engine keeps them in a compact form and builds the Lease
  // it points to in a cache (valid until the next apply(); not safe to call from two threads at once).
  const Lease* lease(LeaseId id) const;
  std::vector<Lease> leases(AccountId account) const;  // as buyer or provider, id order
  const Pool* pool(PoolId id) const;
  std::optional<PoolCapacity> pool_capacity(PoolId id, Seconds from, Seconds to) const;
  // Dry run of a buy order for `account` at now(): the fills it would get, in priority order (all-or-
  // none orders: all or nothing). Empty for an invalid or unfillable request (among them a quantity over
  // 100,000,000 GPUs or not a multiple of min_chunk, which a placement refuses), in a halted market, for a
  // post_only bid (it never takes) and for a gtd bid already expired: what the placement would get.
  std::vector<QuoteFill> quote(const OrderRequest& buy, AccountId account) const;
  bool halted(const MarketId& market) const;  // false for an unknown market
  std::uint64_t digest() const;  // FNV-1a over the whole state (EngineState), stable across runs
  Seq last_seq() const;
  Seconds now() const;
  const EngineConfig& config() const;

  // The server calls this after a batch commits: client_order_ids of orders that ended at or before
  // `seq` are forgotten (the store answers repeats of those). Not part of the replayed state.
  void committed_through(Seq seq);

  // Brute-force self-check for tests (quadratic): empty when every invariant holds, else what broke.
  // Bids: filled + remaining = quantity. Asks: filled + lapsed + free + cancelled = total. Pools: the
  // commitments index equals asks' free capacity plus leases, and never exceeds the pool's GPUs ahead.
  // No resting bid and ask of a non-halted market are mutually eligible and crossed. Views equal a
  // recomputation from the resting orders.
  std::string check_invariants() const;
  // The constraint groups a market's book keeps for its bids, with open bids or not: as many as the distinct
  // constraint sets (regions apart) its open bids had at once, not as it ever saw (for tests; 0 for an
  // unknown market).
  std::size_t constraint_groups(const MarketId& market) const;

  EngineState snapshot() const;
  static Engine restore(EngineConfig config, const EngineState& state);
  // The digest() an engine in `state` has, computed from the state alone.
  static std::uint64_t digest(const EngineState& state);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpuex::matching
