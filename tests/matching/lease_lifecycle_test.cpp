// Leases: reserved -> active -> completed, release and billing.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

LeaseId buy_lease(Fixture& f, std::int64_t start, std::int64_t end, bool interruptible_bid = false) {
  OrderRequest b = buy_window(usd4(20000), 4, start, end);
  b.constraints.interruptible = interruptible_bid;
  f.place(kBuyer, b);
  return of_type<LeaseChanged>(f.events()).at(0).lease.id;
}

}  // namespace

TEST_CASE("a lease moves reserved -> active -> completed and is billed its window", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  const LeaseId id = buy_lease(f, T0 + H, T0 + 3 * H);
  CHECK(f.lease(id).status == LeaseStatus::reserved);
  CHECK(f.lease(id).owed == 16'000'000);  // 2.00 x 4 x 2 h
  f.advance(H);
  f.tick();
  CHECK(f.lease(id).status == LeaseStatus::active);
  f.advance(2 * H);
  f.tick();
  CHECK(f.lease(id).status == LeaseStatus::completed);
  CHECK(f.lease(id).billed == 16'000'000);
  CHECK(f.lease(id).owed == 0);
  CHECK(f.lease(id).ended);
  CHECK(f.engine().lease(id) == nullptr);
}

TEST_CASE("a command far ahead applies both transitions at once", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  const LeaseId id = buy_lease(f, T0 + H, T0 + 3 * H);
  f.advance(5 * H);
  const auto& ev = f.tick();
  const auto changes = of_type<LeaseChanged>(ev);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].lease.id == id);
  CHECK(changes[0].lease.status == LeaseStatus::completed);
}

TEST_CASE("a firm lease released early still owes its whole window", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  const LeaseId id = buy_lease(f, T0, T0 + 10 * H);
  f.advance(H);
  f.run(kBuyer, ReleaseLease{id});
  const Lease& l = f.lease(id);
  CHECK(l.status == LeaseStatus::released);
  CHECK(l.ends_at == Seconds(T0 + H));
  CHECK(l.billed == 80'000'000);  // 2.00 x 4 x 10 h
  // The GPUs return to the pool, not to the ask: a new ask can use them.
  const OrderId again = f.place(kProvider, sell(pool, usd4(20000), 4, T0 + H, T0 + 10 * H));
  CHECK(f.status(again) == OrderStatus::open);
}

TEST_CASE("an interruptible lease released by its buyer pays seconds used, at least min_bill", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  const LeaseId a = buy_lease(f, T0, T0 + 10 * H, true);
  const LeaseId b = buy_lease(f, T0, T0 + 10 * H, true);
  f.advance(600);
  f.run(kBuyer, ReleaseLease{a});
  CHECK(f.lease(a).billed == 8'000'000);  // 10 min used -> min_bill 1 h: 2.00 x 4 x 1 h
  f.advance(2 * H);
  f.run(kBuyer, ReleaseLease{b});
  CHECK(f.lease(b).billed == 17'333'333);  // 2 h 10 min used: 2.00 x 4 x 7800 s / 3600 = 17.333333
}

TEST_CASE("min_bill is capped by the window", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  const LeaseId a = buy_lease(f, T0, T0 + 1800, true);
  f.run(kBuyer, ReleaseLease{a});
  CHECK(f.lease(a).billed == 4'000'000);  // 30 min window: 2.00 x 4 x 0.5 h
}

TEST_CASE("only the buyer may release, and only an open lease", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  const LeaseId id = buy_lease(f, T0, T0 + H);
  f.run(kBuyer2, ReleaseLease{id});
  REQUIRE(of_type<CommandRejected>(f.events()).size() == 1);
  CHECK(of_type<CommandRejected>(f.events())[0].reason == Reason::not_found);
  f.run(kBuyer, ReleaseLease{id});
  f.run(kBuyer, ReleaseLease{id});
  CHECK(of_type<CommandRejected>(f.events())[0].reason == Reason::not_found);
}

TEST_CASE("leases of an account list buyer and provider sides", "[lease]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * D));
  buy_lease(f, T0, T0 + H);
  CHECK(f.engine().leases(kBuyer).size() == 1);
  CHECK(f.engine().leases(kProvider).size() == 1);
  CHECK(f.engine().leases(kBuyer2).empty());
}
