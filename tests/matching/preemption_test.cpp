// Interruptible capacity on spot-tier pools: preemption, its pricing, notice and billing.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

OrderRequest interruptible(OrderRequest r) {
  r.constraints.interruptible = true;
  return r;
}

// A spot pool of 8 GPUs fully leased by kBuyer at 1.00 for 10 days.
struct SpotSetup {
  PoolId pool;
  OrderId ask;
  LeaseId lease;
};

SpotSetup spot_setup(Fixture& f) {
  SpotSetup s;
  s.pool = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  s.ask = f.place(kProvider, sell(s.pool, usd4(10000), 8, T0, T0 + 30 * D));
  f.place(kBuyer, interruptible(buy_window(usd4(10000), 8, T0, T0 + 10 * D)));
  s.lease = of_type<LeaseChanged>(f.events()).at(0).lease.id;
  return s;
}

// kProvider's ask of 8 GPUs on a spot pool (OrderId 2), open from T0 to `ask_end`, sells 4 GPUs for 10 days to
// kBuyer at 1.00 (`cheap`), is amended to 1.10 and sells 4 more (`dear`).
struct AmendedSetup {
  LeaseId cheap;
  LeaseId dear;
};

AmendedSetup amended_setup(Fixture& f, std::int64_t ask_end) {
  AmendedSetup s;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  f.place(kProvider, sell(pool, usd4(10000), 8, T0, ask_end));
  f.place(kBuyer, interruptible(buy_window(usd4(12000), 4, T0, T0 + 10 * D)));
  s.cheap = of_type<LeaseChanged>(f.events()).at(0).lease.id;
  f.run(kProvider, Amend{OrderId(2), std::nullopt, usd4(11000)});
  f.place(kBuyer, interruptible(buy_window(usd4(12000), 4, T0, T0 + 10 * D)));
  s.dear = of_type<LeaseChanged>(f.events()).at(0).lease.id;
  return s;
}

}  // namespace

TEST_CASE("an interruptible bid preempts a cheaper interruptible lease after the notice", "[preemption]") {
  Fixture f;
  const SpotSetup s = spot_setup(f);
  f.advance(600);
  const OrderId bid = f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  const Trade& t = trades[0];
  CHECK(t.preemption);
  CHECK(t.preempted_lease == s.lease);
  CHECK(t.quantity == Qty(4));
  CHECK(t.price == usd4(10001));  // max(ask 1.00, preempted 1.00 + 1 tick)
  CHECK(t.seller == kProvider);
  CHECK(t.sell_order == s.ask);
  const std::int64_t now = T0 + 600;
  CHECK(t.start == Seconds(now + 120));  // the spot window shifts by the notice
  CHECK(t.end == Seconds(now + 120 + H));
  CHECK(f.status(bid) == OrderStatus::filled);

  // Events: trade, new lease, split-off rest, preempted lease, notice.
  const auto leases = of_type<LeaseChanged>(f.events());
  REQUIRE(leases.size() == 3);
  const Lease& fresh = leases[0].lease;
  const Lease& rest = leases[1].lease;
  const Lease& pre = leases[2].lease;
  CHECK(fresh.buyer == kBuyer2);
  CHECK(fresh.status == LeaseStatus::reserved);
  CHECK(rest.split_from == s.lease);
  CHECK(rest.quantity == Qty(4));
  CHECK(rest.status == LeaseStatus::active);
  CHECK(pre.id == s.lease);
  CHECK(pre.quantity == Qty(4));
  CHECK(pre.status == LeaseStatus::preempted);
  CHECK(pre.preempted_at == Seconds(now));
  CHECK(pre.ends_at == Seconds(now + 120));
  // Pays only the seconds used: 1.00 x 4 GPUs x 720 s = 0.80 USD.
  CHECK(pre.owed == 800'000);
  const auto notices = of_type<LeasePreempted>(f.events());
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].buyer == kBuyer);
  CHECK(notices[0].ends_at == Seconds(now + 120));
  // The selling ask's status and accounting do not change.
  CHECK(of_type<OrderUpdated>(f.events()).empty());

  f.advance(120);
  const auto& ev = f.tick();
  const auto changes = of_type<LeaseChanged>(ev);
  REQUIRE(changes.size() == 2);  // the preempted lease ends; the new one starts
  CHECK(changes[0].lease.id == s.lease);
  CHECK(changes[0].lease.billed == 800'000);
  CHECK(changes[0].lease.ended);
  CHECK(changes[1].lease.status == LeaseStatus::active);
}

TEST_CASE("preemption is priced at most the bid's limit", "[preemption]") {
  Fixture f;
  spot_setup(f);
  // 1.0000 is not below the lease's price 1.00: nothing to preempt.
  const OrderId at_par = f.place(kBuyer2, interruptible(buy_duration(usd4(10000), 4, H)));
  CHECK(trades_of(f.events()).empty());
  f.run(kBuyer2, Cancel{at_par});
  // 1.0001 is: the trade is at exactly the limit.
  f.place(kBuyer2, interruptible(buy_duration(usd4(10001), 4, H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].price == usd4(10001));
}

TEST_CASE("firm bids and single_pool bids do not preempt", "[preemption]") {
  Fixture f;
  spot_setup(f);
  f.place(kBuyer2, buy_duration(usd4(50000), 4, H));  // not interruptible: cannot use spot pools
  CHECK(trades_of(f.events()).empty());
  OrderRequest sp = interruptible(buy_duration(usd4(50000), 4, H));
  sp.constraints.single_pool = true;
  sp.time_in_force = TimeInForce::ioc;
  f.place(kBuyer2, sp);
  CHECK(trades_of(f.events()).empty());
}

TEST_CASE("cheapest leases are preempted first and a lease in its notice is not preempted again", "[preemption]") {
  Fixture f;
  const auto [cheap, dear] = amended_setup(f, T0 + 30 * D);  // leases at 1.00 and 1.10; the ask stays open
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].preempted_lease == cheap);
  CHECK(trades_of(f.events())[0].price == usd4(11000));  // max(ask now 1.10, 1.00 + tick)
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].preempted_lease == dear);
  // Both are in their notice now; kBuyer2's own new leases (3 at 1.10, 4 at 1.1001) are not offered back
  // to it, but a third buyer may preempt them, the cheaper first, at 1.10 + 1 tick.
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  CHECK(trades_of(f.events()).empty());
  f.place(AccountId(12), interruptible(buy_duration(usd4(20000), 4, H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].preempted_lease == LeaseId(3));
  CHECK(trades_of(f.events())[0].price == usd4(11001));
}

TEST_CASE("a lease split off by a preemption keeps its ask's list price, and is preempted from it", "[preemption]") {
  Fixture f;
  const LeaseId cheap = amended_setup(f, T0 + 10 * D).cheap;
  CHECK(f.status(OrderId(2)) == OrderStatus::filled);  // its leases keep its last price, 1.10
  // 2 of the cheap lease's 4 GPUs preempted: the other 2 go on as a lease split off from it, sold by the
  // same ask.
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 2, H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].preempted_lease == cheap);
  CHECK(trades_of(f.events())[0].price == usd4(11000));  // max(the ask's 1.10, 1.00 + tick)
  std::optional<Lease> rest;
  for (const LeaseChanged& c : of_type<LeaseChanged>(f.events())) {
    if (c.lease.split_from == cheap) rest = c.lease;
  }
  REQUIRE(rest);
  CHECK(rest->quantity == Qty(2));
  CHECK(rest->price == usd4(10000));
  CHECK(rest->ask_list_price == usd4(11000));
  // The rest, now the cheapest lease, is preempted at the same ask's list price.
  f.place(AccountId(12), interruptible(buy_duration(usd4(20000), 2, H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].preempted_lease == rest->id);
  CHECK(trades_of(f.events())[0].price == usd4(11000));
}

TEST_CASE("a fixed window that starts within the notice cannot preempt", "[preemption]") {
  Fixture f;
  spot_setup(f);
  f.place(kBuyer2, interruptible(buy_window(usd4(20000), 4, T0 + 60, T0 + H)));
  CHECK(trades_of(f.events()).empty());
  f.place(kBuyer2, interruptible(buy_window(usd4(20000), 4, T0 + 600, T0 + H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].start == Seconds(T0 + 600));
}

TEST_CASE("a cancelled selling ask stops its leases from being resold", "[preemption]") {
  Fixture f;
  const SpotSetup s = spot_setup(f);
  f.run(kProvider, Cancel{s.ask});
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  CHECK(trades_of(f.events()).empty());
}

TEST_CASE("an ask that expired at its expire_at stops its leases from being resold", "[preemption]") {
  // DESIGN.md §4: preemptable "provided the ask that sold them (open or filled, not cancelled)".
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  OrderRequest ask = sell(pool, usd4(10000), 8, T0, T0 + 30 * D);
  ask.time_in_force = TimeInForce::gtd;
  ask.expire_at = Seconds(T0 + H);
  const OrderId a = f.place(kProvider, ask);
  f.place(kBuyer, interruptible(buy_window(usd4(10000), 8, T0, T0 + 10 * D)));
  REQUIRE(trades_of(f.events()).size() == 1);
  f.advance(2 * H);
  const OrderId bid = f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  CHECK(f.status(a) == OrderStatus::expired);
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(bid) == OrderStatus::open);
}

TEST_CASE("preemption keeps the selling ask's min_duration", "[preemption]") {
  // The leased GPUs count as the ask's free capacity, and "the bid's window ... is at least the ask's
  // min_duration" (DESIGN.md §4, Matching).
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  OrderRequest ask = sell(pool, usd4(10000), 8, T0, T0 + 30 * D);
  ask.min_duration = Seconds(4 * H);
  f.place(kProvider, ask);
  f.place(kBuyer, interruptible(buy_window(usd4(10000), 8, T0, T0 + 10 * D)));
  REQUIRE(trades_of(f.events()).size() == 1);
  f.advance(600);
  const OrderId short_bid = f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, H)));
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(short_bid) == OrderStatus::open);
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 4, 4 * H)));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].preemption);
  CHECK(trades[0].quantity == Qty(4));
  CHECK(trades[0].price == usd4(10001));
  CHECK(trades[0].start == Seconds(T0 + 600 + 120));
  CHECK(trades[0].end == Seconds(T0 + 600 + 120 + 4 * H));
}

TEST_CASE("the pool is never oversold through preemption", "[preemption]") {
  Fixture f;
  const SpotSetup s = spot_setup(f);
  f.place(kBuyer2, interruptible(buy_duration(usd4(20000), 8, 2 * H)));
  REQUIRE(trades_of(f.events()).size() == 1);
  const auto cap = f.engine().pool_capacity(s.pool, Seconds(T0), Seconds(T0 + 30 * D));
  REQUIRE(cap);
  CHECK(cap->leased.max(Seconds(T0), Seconds(T0 + 30 * D)) == 8);
  CHECK(cap->unallocated.min(Seconds(T0), Seconds(T0 + 30 * D)) == 0);
}
