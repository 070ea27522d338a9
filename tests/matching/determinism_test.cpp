// Determinism and recovery: replay gives identical events and digest; snapshot/restore is exact.
#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <tuple>

#include "fixture.hpp"
#include "random_commands.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

// One command to `e` at seq and time t; its events.
EventSink apply_at(Engine& e, Seq seq, std::int64_t t, AccountId acc, CommandBody b) {
  EventSink out;
  e.apply(Command{seq, Seconds(t), acc, std::move(b)}, out);
  return out;
}

// A small scripted session touching most commands.
std::vector<Command> script() {
  std::vector<Command> c;
  Seq s = 0;
  auto at = [&](std::int64_t t, AccountId a, CommandBody b) { c.push_back(Command{++s, Seconds(t), a, std::move(b)}); };
  PoolSpec spot = pool_spec(8, 1, Tier::spot);
  PoolSpec green = pool_spec(8, 2);
  green.energy = EnergyAttributes{1100, 9000, 5000};
  at(T0, kProvider, AddPool{pool_spec(8, 2)});                 // pool 1
  at(T0, kProvider, AddPool{spot});                            // pool 2
  at(T0, kProvider2, AddPool{green});                          // pool 3
  at(T0, kProvider, PlaceOrder{sell(PoolId(1), usd4(20000), 8, T0, T0 + 10 * D)});
  at(T0, kProvider, PlaceOrder{sell(PoolId(2), usd4(10000), 8, T0, T0 + 10 * D)});
  at(T0 + 1, kProvider2, PlaceOrder{sell(PoolId(3), usd4(22000), 16, T0 + 31 * D, T0 + 40 * D)});
  OrderRequest intr = buy_window(usd4(12000), 8, T0 + 10, T0 + 5 * D);
  intr.constraints.interruptible = true;
  at(T0 + 2, kBuyer, PlaceOrder{intr});
  at(T0 + 3, kBuyer, PlaceOrder{buy_duration(usd4(21000), 4, 2 * H)});
  OrderRequest pre = buy_duration(usd4(30000), 4, H);
  pre.constraints.interruptible = true;
  at(T0 + 60, kBuyer2, PlaceOrder{pre});
  at(T0 + 100, kAdmin, VerifyPool{PoolId(3), true, Seconds(T0 + 20 * D), "x"});
  OrderRequest fwd = buy_window(usd4(18000), 8, T0 + 32 * D, T0 + 33 * D);
  fwd.constraints.green_only = true;
  at(T0 + 200, kBuyer2, PlaceOrder{fwd});
  at(T0 + 300, kBuyer, PlaceOrder{buy_duration(usd4(15000), 2, H)});
  at(T0 + H, kAdmin, Tick{});
  at(T0 + 2 * H, kBuyer, Amend{OrderId(12), std::nullopt, usd4(20000)});
  at(T0 + 3 * H, kAdmin, Tick{});
  return c;
}

std::vector<EventSink> run_all(Engine& e, const std::vector<Command>& cmds) {
  std::vector<EventSink> out;
  for (const Command& c : cmds) {
    out.emplace_back();
    e.apply(c, out.back());
  }
  return out;
}

}  // namespace

TEST_CASE("replaying the same commands gives identical events and digest", "[determinism]") {
  Engine a(Fixture::default_config());
  Engine b(Fixture::default_config());
  const auto cmds = script();
  const auto ea = run_all(a, cmds);
  const auto eb = run_all(b, cmds);
  REQUIRE(ea.size() == eb.size());
  for (std::size_t i = 0; i < ea.size(); ++i) {
    INFO("command " << i);
    CHECK(ea[i] == eb[i]);
    REQUIRE(ea[i].size() == eb[i].size());
    for (std::size_t j = 0; j < ea[i].size(); ++j) CHECK(to_string(ea[i][j]) == to_string(eb[i][j]));
  }
  CHECK(a.digest() == b.digest());
  std::size_t trades = 0;
  for (const auto& ev : ea) trades += trades_of(ev).size();
  CHECK(trades >= 3);
}

TEST_CASE("a restored engine equals the original and behaves the same", "[determinism][restore]") {
  const auto cmds = script();
  for (std::size_t cut = 1; cut < cmds.size(); ++cut) {
    INFO("restored after command " << cut);
    Engine a(Fixture::default_config());
    const std::vector<Command> head(cmds.begin(), cmds.begin() + static_cast<std::ptrdiff_t>(cut));
    const std::vector<Command> tail(cmds.begin() + static_cast<std::ptrdiff_t>(cut), cmds.end());
    run_all(a, head);
    Engine b = Engine::restore(Fixture::default_config(), a.snapshot());
    const EngineState sa = a.snapshot();
    const EngineState sb = b.snapshot();
    CHECK(sb == sa);
    for (std::size_t i = 0; i < std::min(sa.open_orders.size(), sb.open_orders.size()); ++i) {
      CHECK(to_string(sb.open_orders[i]) == to_string(sa.open_orders[i]));
    }
    for (std::size_t i = 0; i < std::min(sa.leases.size(), sb.leases.size()); ++i) {
      CHECK(to_string(sb.leases[i]) == to_string(sa.leases[i]));
    }
    CHECK(b.digest() == a.digest());
    CHECK(b.depth(kH100, Bucket::spot(), 100) == a.depth(kH100, Bucket::spot(), 100));
    const auto ea = run_all(a, tail);
    const auto eb = run_all(b, tail);
    CHECK(ea == eb);
    CHECK(a.digest() == b.digest());
  }
}

// The engine keeps a lease's ask window as 32-bit offsets from the lease's own window; one that does not fit is
// kept apart, and must read back and survive a snapshot. (An ends_at other than the end, kept apart too, is the
// preemption's in the script above, restored after every command.)
TEST_CASE("a lease keeps an ask window that its compact fields do not hold", "[determinism][restore]") {
  Engine a(Fixture::default_config());
  Seq s = 0;
  auto run = [&](std::int64_t t, AccountId acc, CommandBody b) {
    EventSink out;
    a.apply(Command{++s, Seconds(t), acc, std::move(b)}, out);
  };
  const std::int64_t far = T0 + (std::int64_t{1} << 33);  // more than 2^32 s after the lease's end
  run(T0, kProvider, AddPool{pool_spec(8, 2)});                                        // pool 1
  run(T0, kProvider, PlaceOrder{sell(PoolId(1), usd4(20000), 8, T0, far)});          // order 2
  run(T0 + 1, kBuyer, PlaceOrder{buy_window(usd4(30000), 8, T0 + D, T0 + 2 * D)});  // lease 1
  const Lease* l = a.lease(LeaseId(1));
  REQUIRE(l != nullptr);
  CHECK(l->ask_window_start == Seconds(T0));
  CHECK(l->ask_window_end == Seconds(far));
  CHECK(l->ends_at == std::optional<Seconds>(Seconds(T0 + 2 * D)));
  const EngineState sa = a.snapshot();
  Engine b = Engine::restore(Fixture::default_config(), sa);
  CHECK(b.snapshot() == sa);
  CHECK(b.digest() == a.digest());
  const Lease* r = b.lease(LeaseId(1));
  REQUIRE(r != nullptr);
  CHECK(r->ask_window_end == Seconds(far));
}

// A bid keeps no effective price or min_duration of its own (they are its limit and 0); one that sent a
// min_duration (ignored, and echoed) keeps both in an ask record, which must read back, follow an amend of its price
// and survive a snapshot.
TEST_CASE("a bid that sent a min_duration keeps it through an amend and a restore", "[determinism][restore]") {
  Engine a(Fixture::default_config());
  Seq s = 0;
  apply_at(a, ++s, T0, kProvider, AddPool{pool_spec(8, 2)});  // pool 1
  OrderRequest bid = buy_window(usd4(10000), 4, T0 + D, T0 + 2 * D);
  bid.min_duration = Seconds(H);
  apply_at(a, ++s, T0, kBuyer, PlaceOrder{bid});  // order 2, resting
  const Order* o = a.order(OrderId(2));
  REQUIRE(o != nullptr);
  CHECK(o->request.min_duration == Seconds(H));
  CHECK(o->effective_price == usd4(10000));
  apply_at(a, ++s, T0 + 1, kBuyer, Amend{OrderId(2), std::nullopt, usd4(11000)});
  o = a.order(OrderId(2));
  REQUIRE(o != nullptr);
  CHECK(o->request.price == usd4(11000));
  CHECK(o->effective_price == usd4(11000));
  CHECK(o->request.min_duration == Seconds(H));
  const EngineState sa = a.snapshot();
  Engine b = Engine::restore(Fixture::default_config(), sa);
  CHECK(b.snapshot() == sa);
  CHECK(b.digest() == a.digest());
  const CommandBody cross = PlaceOrder{sell(PoolId(1), usd4(10500), 8, T0 + D, T0 + 3 * D)};
  const EventSink ea = apply_at(a, s + 1, T0 + 2, kProvider, cross);
  const EventSink eb = apply_at(b, s + 1, T0 + 2, kProvider, cross);
  CHECK(ea == eb);
  CHECK(!of_type<TradeEvent>(ea).empty());
  CHECK(a.digest() == b.digest());
}

// An open order keeps its start as its window_start, its duration in 32 bits, and its updated_at, window_end and
// priority as 32-bit offsets after its created_at, window_start and id; the rare values those do not hold (a
// sell's start in the past, a duration or window longer than 2^32 s, an order updated 2^32 s after its creation or
// amended 2^32 commands after its placement, and what a snapshot may give: an updated_at before created_at, a
// priority before the id) are kept apart, and must read back, survive a snapshot and match the same.
TEST_CASE("an order keeps the values its compact fields do not hold", "[determinism][restore]") {
  Engine a(Fixture::default_config());
  const std::int64_t wide = std::int64_t{1} << 33;  // more than 2^32
  apply_at(a, 1, T0, kProvider, AddPool{pool_spec(8, 2)});  // pool 1
  // A start in the past; a window of more than 2^32 s; a duration of more than 2^32 s.
  apply_at(a, 2, T0, kProvider, PlaceOrder{sell(PoolId(1), usd4(20000), 8, T0 - D, T0 + 10 * D)});
  apply_at(a, 3, T0, kProvider, PlaceOrder{sell(PoolId(1), usd4(20000), 8, T0 + 20 * D, T0 + 2 * wide)});
  apply_at(a, 4, T0, kBuyer, PlaceOrder{buy_duration(usd4(10000), 4, wide)});
  apply_at(a, 5, T0, kBuyer, PlaceOrder{buy_window(usd4(10000), 4, T0 + wide + D, T0 + wide + 2 * D)});
  // The last window the 32 bits hold (2^32 - 2 s) and the first they do not (2^32 - 1 is the mark of "kept apart").
  const std::int64_t last = 0xFFFFFFFE;
  const std::int64_t far = T0 + wide + 20 * D;  // after the amend below, whose time would expire them
  apply_at(a, 6, T0, kProvider, AddPool{pool_spec(8, 2)});  // pool 6
  apply_at(a, 7, T0, kProvider, PlaceOrder{sell(PoolId(6), usd4(20000), 1, far, far + last)});
  apply_at(a, 8, T0, kProvider, PlaceOrder{sell(PoolId(6), usd4(20000), 1, far, far + last + 1)});
  const Order* o2 = a.order(OrderId(2));
  REQUIRE(o2 != nullptr);
  CHECK(o2->request.start == std::optional<Seconds>(Seconds(T0 - D)));
  CHECK(o2->window_start == Seconds(T0));
  const EngineState early = a.snapshot();
  Engine r = Engine::restore(Fixture::default_config(), early);
  CHECK(r.snapshot() == early);
  CHECK(r.digest() == a.digest());
  const std::int64_t later = T0 + wide;  // order 5 updated 2^33 s after its creation, 2^33 commands after it
  apply_at(a, wide, later, kBuyer, Amend{OrderId(5), std::nullopt, usd4(11000)});
  const Order* o3 = a.order(OrderId(3));
  const Order* o4 = a.order(OrderId(4));
  const Order* o5 = a.order(OrderId(5));
  REQUIRE((o3 && o4 && o5));
  CHECK(o3->window_end == Seconds(T0 + 2 * wide));
  REQUIRE((a.order(OrderId(7)) && a.order(OrderId(8))));
  CHECK(a.order(OrderId(7))->window_end == Seconds(far + last));
  CHECK(a.order(OrderId(8))->window_end == Seconds(far + last + 1));
  CHECK(o4->request.duration == std::optional<Seconds>(Seconds(wide)));
  CHECK(o5->updated_at == Seconds(later));
  CHECK(o5->priority == wide);
  CHECK(o5->created_at == Seconds(T0));
  EngineState sa = a.snapshot();
  Engine b = Engine::restore(Fixture::default_config(), sa);
  CHECK(b.snapshot() == sa);
  CHECK(b.digest() == a.digest());
  const CommandBody cross = PlaceOrder{sell(PoolId(1), usd4(10500), 4, T0 + wide + D, T0 + wide + 3 * D)};
  const EventSink ea = apply_at(a, wide + 1, later + 1, kProvider, cross);
  const EventSink eb = apply_at(b, wide + 1, later + 1, kProvider, cross);
  CHECK(ea == eb);
  CHECK(!of_type<TradeEvent>(ea).empty());
  CHECK(a.digest() == b.digest());
  // What only a snapshot gives: before the base, the last offset the 32 bits hold, and the first they do not.
  const std::int64_t offsets[] = {-1, last, last + 1};
  std::size_t k = 0;
  for (Order& o : sa.open_orders) {
    const std::int64_t off = offsets[k++ % std::size(offsets)];
    o.updated_at = o.created_at + Seconds(off);
    o.priority = o.id.value + off;
  }
  REQUIRE(sa.open_orders.size() >= std::size(offsets));
  Engine c = Engine::restore(Fixture::default_config(), sa);
  CHECK(c.snapshot() == sa);
  CHECK(c.digest() == Engine::digest(sa));
}

// A lease keeps its trade's id, buy order, list price, green discount and bucket as offsets and 16-bit fields
// when they fit, else whole apart: each case through a live engine (a buy order 2^33 commands after its sell
// order, then a preemption's split of that lease), a snapshot and a restore, and what only a snapshot gives.
TEST_CASE("a lease keeps the values its compact fields do not hold", "[determinism][restore]") {
  Engine a(Fixture::default_config());
  const std::int64_t wide = std::int64_t{1} << 33;
  apply_at(a, 1, T0, kProvider, AddPool{pool_spec(8, 1, Tier::spot)});                           // pool 1
  apply_at(a, 2, T0, kProvider, PlaceOrder{sell(PoolId(1), usd4(10000), 8, T0 + D, T0 + 10 * D)});
  auto spot_bid = [](std::int64_t from, std::int64_t to) {  // a bid a spot pool may fill
    OrderRequest r = buy_window(usd4(12000), 8, from, to);
    r.constraints.interruptible = true;
    return r;
  };
  apply_at(a, 3, T0, kBuyer, PlaceOrder{spot_bid(T0 + D, T0 + 2 * D)});  // lease 1: fits
  apply_at(a, wide, T0, kBuyer, PlaceOrder{spot_bid(T0 + 2 * D, T0 + 3 * D)});  // lease 2: apart
  REQUIRE(a.lease(LeaseId(2)) != nullptr);
  const Lease l2 = *a.lease(LeaseId(2));  // a copy: the engine's answer lives until its next command
  CHECK(l2.buy_order == OrderId(wide));
  CHECK(l2.sell_order == OrderId(2));
  apply_at(a, wide + 1, T0 + 10, kProvider, Amend{OrderId(2), std::nullopt, usd4(11000)});  // ask list price apart too
  OrderRequest pre = buy_window(usd4(30000), 2, T0 + 2 * D, T0 + 3 * D);
  pre.constraints.interruptible = true;
  const EventSink ep = apply_at(a, wide + 2, T0 + 20, kBuyer2, PlaceOrder{pre});  // preempts 2 of lease 2's 8 GPUs
  bool preempted = false;
  for (const Trade& t : trades_of(ep)) preempted = preempted || (t.preemption && t.preempted_lease == LeaseId(2));
  REQUIRE(preempted);
  const std::vector<Lease> mine = a.leases(kBuyer);
  const auto rest = std::find_if(mine.begin(), mine.end(), [](const Lease& l) { return l.split_from == LeaseId(2); });
  REQUIRE(rest != mine.end());  // the split-off rest keeps lease 2's trade and orders
  CHECK(rest->buy_order == OrderId(wide));
  CHECK(rest->trade == l2.trade);
  CHECK(a.check_invariants().empty());
  EngineState sa = a.snapshot();
  Engine b = Engine::restore(Fixture::default_config(), sa);
  CHECK(b.snapshot() == sa);
  CHECK(b.digest() == a.digest());
  // The ask's end writes its list price and withdrawal into its leases; then a release.
  for (const auto& [seq, acc, body] : {std::tuple{wide + 3, kProvider, CommandBody{Cancel{OrderId(2)}}},
                                       std::tuple{wide + 4, kBuyer, CommandBody{ReleaseLease{rest->id}}}}) {
    const EventSink ea = apply_at(a, seq, T0 + 30, acc, body);
    const EventSink eb = apply_at(b, seq, T0 + 30, acc, body);
    CHECK(ea == eb);
    CHECK(a.digest() == b.digest());
  }
  // What only a snapshot gives, each on lease 1 (whose values fit) alone.
  const EngineState base = a.snapshot();
  auto lease1 = [](EngineState& s) -> Lease& {
    return *std::find_if(s.leases.begin(), s.leases.end(), [](const Lease& l) { return l.id == LeaseId(1); });
  };
  const std::vector<std::function<void(Lease&)>> cases = {
      [](Lease& l) { l.trade = TradeId(l.id.value + 1); },                            // a trade after its lease
      [](Lease& l) { l.trade = TradeId(l.id.value - (std::int64_t{1} << 32)); },      // 2^32 leases before
      [](Lease& l) { l.trade = TradeId(l.id.value - (std::int64_t{1} << 32) + 1); },  // the most that fits
      [](Lease& l) { l.buy_order = OrderId(l.sell_order.value + (std::int64_t{1} << 31)); },
      [](Lease& l) { l.buy_order = OrderId(l.sell_order.value + (std::int64_t{1} << 31) - 1); },
      [](Lease& l) { l.buy_order = OrderId(l.sell_order.value - (std::int64_t{1} << 31)); },
      [](Lease& l) { l.buy_order = OrderId(l.sell_order.value - (std::int64_t{1} << 31) - 1); },
      [](Lease& l) { l.buy_order = OrderId(std::numeric_limits<std::int64_t>::min()); },
      [](Lease& l) { l.list_price = Price(l.price.value - (std::int64_t{1} << 31) - 1); },
      [](Lease& l) { l.list_price = Price(l.price.value - (std::int64_t{1} << 31)); },
      [](Lease& l) { l.green_discount_bps = 40000; },
      [](Lease& l) { l.green_discount_bps = 32767; },
      [](Lease& l) { l.green_discount_bps = 32768; },
      [](Lease& l) { l.green_discount_bps = -32769; },
      [](Lease& l) { l.bucket = Bucket{546103}; },  // month code 65,535: the last that fits
      [](Lease& l) { l.bucket = Bucket{546104}; },
      [](Lease& l) { l.bucket = Bucket{202713}; },
      [](Lease& l) { l.bucket = Bucket{-202701}; },
      [](Lease& l) { l.bucket = Bucket{999912}; },  // a year past what 16 bits of months hold
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    EngineState s = base;
    cases[i](lease1(s));
    Engine c = Engine::restore(Fixture::default_config(), s);
    CHECK(c.snapshot() == s);
    CHECK(c.digest() == Engine::digest(s));
    CHECK(c.check_invariants().empty());
  }
}

// A lease keeps its buyer in 32 bits (else whole apart, with its trade's fields) and its ask's min_duration and
// min_chunk in 16 bits (else apart, with the ask's window): the values at and past each cutoff through a live engine
// (a buyer's own lease not preempted, a preemption's new lease and split-off rest copying them, a release), a
// snapshot and a restore, and what only a snapshot gives.
TEST_CASE("a lease keeps a buyer, ask min_duration and min_chunk that its compact fields do not hold",
          "[determinism][restore]") {
  const AccountId wide_buyer{std::int64_t{1} << 32};        // the first that 32 bits do not hold
  const AccountId last_buyer{(std::int64_t{1} << 32) - 1};  // the last they hold
  const std::int64_t big = 65536;                            // the first that 16 bits do not hold
  EngineConfig cfg = Fixture::default_config();
  cfg.default_limits.max_open_gpus = Qty(4 * big);  // bids of 2^16 GPUs and more
  Engine a(cfg);
  auto spot_bid = [](std::int64_t qty) {
    OrderRequest r = buy_window(usd4(12000), qty, T0 + D, T0 + 2 * D);
    r.constraints.interruptible = true;
    return r;
  };
  auto preempting_bid = [&] {  // its lot of 2^16 GPUs leaves lease 2 (lot lcm(2^16, 2^16 - 1)) alone
    OrderRequest r = spot_bid(big);
    r.price = usd4(30000);
    r.min_chunk = Qty(big);
    return r;
  };
  auto ask = [](PoolId pool, std::int64_t qty, std::int64_t terms) {
    OrderRequest r = sell(pool, usd4(10000), qty, T0 + D, T0 + 10 * D);
    r.min_chunk = Qty(terms);
    r.min_duration = Seconds(terms);
    return r;
  };
  apply_at(a, 1, T0, kProvider, AddPool{pool_spec(8, 2 * big / 8, Tier::spot)});               // pool 1
  apply_at(a, 2, T0, kProvider, AddPool{pool_spec(8, big / 8, Tier::spot)});                   // pool 2
  apply_at(a, 3, T0, kProvider, PlaceOrder{ask(PoolId(1), 2 * big, big)});                     // order 3
  apply_at(a, 4, T0, kProvider, PlaceOrder{ask(PoolId(2), big - 1, big - 1)});                 // order 4
  apply_at(a, 5, T0, wide_buyer, PlaceOrder{spot_bid(2 * big)});                               // lease 1: apart
  apply_at(a, 6, T0, last_buyer, PlaceOrder{spot_bid(big - 1)});                               // lease 2: fits
  const std::vector<std::tuple<LeaseId, AccountId, std::int64_t>> made = {{LeaseId(1), wide_buyer, big},
                                                                          {LeaseId(2), last_buyer, big - 1}};
  for (const auto& [id, buyer, terms] : made) {
    const Lease* l = a.lease(id);
    REQUIRE(l != nullptr);
    CHECK(l->buyer == buyer);
    CHECK(l->ask_min_chunk == Qty(terms));
    CHECK(l->ask_min_duration == Seconds(terms));
  }
  // The wide buyer's own lease is not preempted by its own bid (the pools are full: nothing else to trade).
  CHECK(trades_of(apply_at(a, 7, T0 + 10, wide_buyer, PlaceOrder{preempting_bid()})).empty());
  apply_at(a, 8, T0 + 10, wide_buyer, Cancel{OrderId(7)});
  const EventSink ep = apply_at(a, 9, T0 + 20, kBuyer2, PlaceOrder{preempting_bid()});  // half of lease 1
  std::vector<Trade> trades = trades_of(ep);
  REQUIRE(trades.size() == 1);
  REQUIRE(trades[0].preempted_lease == LeaseId(1));
  const Lease* fresh = a.lease(trades[0].lease);
  REQUIRE(fresh != nullptr);
  CHECK(fresh->buyer == kBuyer2);
  CHECK(fresh->ask_min_chunk == Qty(big));
  CHECK(fresh->ask_min_duration == Seconds(big));
  const std::vector<Lease> mine = a.leases(wide_buyer);
  const auto rest = std::find_if(mine.begin(), mine.end(), [](const Lease& l) { return l.split_from == LeaseId(1); });
  REQUIRE(rest != mine.end());
  CHECK(rest->buyer == wide_buyer);
  CHECK(rest->ask_min_chunk == Qty(big));
  CHECK(rest->ask_min_duration == Seconds(big));
  CHECK(a.check_invariants().empty());
  const EngineState sa = a.snapshot();
  Engine b = Engine::restore(cfg, sa);
  CHECK(b.snapshot() == sa);
  CHECK(b.digest() == a.digest());
  const EventSink ea = apply_at(a, 10, T0 + 30, wide_buyer, ReleaseLease{rest->id});
  const EventSink eb = apply_at(b, 10, T0 + 30, wide_buyer, ReleaseLease{rest->id});
  CHECK(ea == eb);
  CHECK(a.digest() == b.digest());
  CHECK(a.lease(rest->id) == nullptr);
  // What only a snapshot gives, each on lease 2 (whose values fit) alone.
  const EngineState base = a.snapshot();
  auto lease2 = [](EngineState& s) -> Lease& {
    return *std::find_if(s.leases.begin(), s.leases.end(), [](const Lease& l) { return l.id == LeaseId(2); });
  };
  const std::vector<std::function<void(Lease&)>> cases = {
      [](Lease& l) { l.buyer = AccountId(std::int64_t{1} << 32); },
      [](Lease& l) { l.buyer = AccountId(-1); },
      [](Lease& l) { l.buyer = AccountId(0); },
      [](Lease& l) { l.ask_min_duration = Seconds(65535); },
      [](Lease& l) { l.ask_min_duration = Seconds(65536); },
      [](Lease& l) { l.ask_min_duration = Seconds(-1); },
      [](Lease& l) { l.ask_min_chunk = Qty(0); },
      [](Lease& l) { l.ask_min_chunk = Qty(65536); },
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    EngineState s = base;
    cases[i](lease2(s));
    Engine c = Engine::restore(cfg, s);
    CHECK(c.snapshot() == s);
    CHECK(c.digest() == Engine::digest(s));
    CHECK(c.check_invariants().empty());
  }
}

// A snapshot may give a bid an effective price other than its limit (the engine never makes one, but restore
// takes what the state says): the restored bid keeps it in an ask record and the state reads back whole.
TEST_CASE("a restored bid keeps an effective price other than its limit", "[determinism][restore]") {
  Engine a(Fixture::default_config());
  EventSink out;
  a.apply(Command{1, Seconds(T0), kProvider, AddPool{pool_spec(8, 2)}}, out);
  a.apply(Command{2, Seconds(T0), kBuyer, PlaceOrder{buy_window(usd4(10000), 4, T0 + D, T0 + 2 * D)}}, out);
  EngineState sa = a.snapshot();
  REQUIRE(sa.open_orders.size() == 1);
  sa.open_orders[0].effective_price = usd4(10001);
  Engine b = Engine::restore(Fixture::default_config(), sa);
  CHECK(b.snapshot() == sa);
  CHECK(b.digest() == Engine::digest(sa));
  const Order* o = b.order(OrderId(2));
  REQUIRE(o != nullptr);
  CHECK(o->effective_price == usd4(10001));
  CHECK(o->request.price == usd4(10000));
}

TEST_CASE("the digest changes with state", "[determinism]") {
  Engine a(Fixture::default_config());
  const std::uint64_t empty = a.digest();
  EventSink ev;
  a.apply(Command{1, Seconds(T0), kProvider, AddPool{pool_spec()}}, ev);
  CHECK(a.digest() != empty);
}

namespace {

// Records a command log the way the server would: each command generated from what the engine answered.
// With `lifecycles`, the generator also plays spot-lease lifecycles (amended asks, preemptions of split leases).
std::vector<Command> record_log(std::uint64_t seed, int length, bool lifecycles = false) {
  Engine engine(RandomCommands::config());
  RandomCommands gen(seed, T0);
  if (lifecycles) gen.play_lifecycles();
  std::vector<Command> log;
  for (int i = 0; i < length; ++i) {
    log.push_back(gen.next());
    EventSink events;
    engine.apply(log.back(), events);
    gen.observe(events);
  }
  return log;
}

}  // namespace

TEST_CASE("a recorded random command log replays to identical events and digests", "[determinism]") {
  int preemptions = 0;  // in the lifecycle logs
  for (const auto& [seed, lifecycles] : {std::pair{7ULL, false}, {8ULL, false}, {9ULL, false}, {7ULL, true},
                                          {8ULL, true}, {9ULL, true}, {10ULL, true}}) {
    INFO("seed " << seed << (lifecycles ? " playing lifecycles" : ""));
    const std::vector<Command> log = record_log(seed, 400, lifecycles);
    Engine a(RandomCommands::config());
    Engine b(RandomCommands::config());
    std::size_t events = 0;
    for (std::size_t i = 0; i < log.size(); ++i) {
      EventSink ea;
      EventSink eb;
      a.apply(log[i], ea);
      b.apply(log[i], eb);
      INFO("command " << i);
      REQUIRE(ea == eb);
      REQUIRE(a.digest() == b.digest());
      events += ea.size();
      if (lifecycles) {
        for (const Trade& t : trades_of(ea)) preemptions += t.preemption ? 1 : 0;
      }
    }
    CHECK(a.snapshot() == b.snapshot());
    CHECK(events > log.size());  // the log really did things
    // A restored engine has the same digest, and replaying the rest of the log keeps them equal.
    Engine c(RandomCommands::config());
    for (std::size_t i = 0; i < log.size() / 2; ++i) {
      EventSink ignored;
      c.apply(log[i], ignored);
    }
    // As after a restart: everything applied so far is committed, so the client_order_ids of ended orders
    // live in the store only (engine.hpp "Restore"), for the original engine as for the restored one.
    c.committed_through(c.last_seq());
    Engine d = Engine::restore(RandomCommands::config(), c.snapshot());
    CHECK(d.digest() == c.digest());
    for (std::size_t i = log.size() / 2; i < log.size(); ++i) {
      EventSink ec;
      EventSink ed;
      c.apply(log[i], ec);
      d.apply(log[i], ed);
      if (ec != ed) {
        FAIL_CHECK("restored engine differs at command " << i << " (seq " << log[i].seq << ")\noriginal:\n"
                                                         << dump(ec) << "restored:\n" << dump(ed));
        break;
      }
    }
    CHECK(c.digest() == d.digest());
  }
  CHECK(preemptions > 10);  // the lifecycle logs replay (and restore in the middle of) preemptions
}

TEST_CASE("the same seed gives the same command log", "[determinism]") {
  CHECK(record_log(11, 200) == record_log(11, 200));
  CHECK_FALSE(record_log(11, 200) == record_log(12, 200));
  CHECK(record_log(11, 200, true) == record_log(11, 200, true));
  CHECK_FALSE(record_log(11, 200, true) == record_log(11, 200));
}
