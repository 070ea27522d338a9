// Pools: registration, resize (never below what is held), retire (nothing open), capacity query.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("a pool's id is its AddPool seq and an unknown market is not found", "[pools]") {
  Fixture f;
  const Seq expected = f.next_seq();
  const PoolId pool = f.add_pool(kProvider);
  CHECK(pool == PoolId(expected));
  CHECK(f.engine().pool(pool)->gpus() == Qty(16));
  PoolSpec bad = pool_spec();
  bad.market = MarketId{"nope"};
  f.run(kProvider, AddPool{bad});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::not_found);
}

TEST_CASE("resize never goes below what asks and leases hold", "[pools]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));  // 32
  f.place(kProvider, sell(pool, usd4(20000), 16, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0 + 5 * H, T0 + 20 * H));  // 24 held in [5h, 10h)
  f.run(kProvider, ResizePool{pool, 2});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::pool_busy);
  f.run(kProvider, ResizePool{pool, 3});
  CHECK(of_type<PoolChanged>(f.events()).at(0).pool.spec.nodes == 3);
  f.run(kBuyer, ResizePool{pool, 5});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::not_found);
}

TEST_CASE("a pool has at most 1,000,000,000 GPUs, when registered and when resized", "[pools]") {
  Fixture f;
  f.run(kProvider, AddPool{pool_spec(64, 15'625'001)});  // 1,000,000,064
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::invalid_field);
  const PoolId pool = f.add_pool(kProvider, pool_spec(64, 15'625'000));  // 1,000,000,000
  CHECK(f.engine().pool(pool)->gpus() == Qty(1'000'000'000));
  f.run(kProvider, ResizePool{pool, 15'625'001});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::invalid_field);
  f.run(kProvider, ResizePool{pool, 2});
  CHECK(of_type<PoolChanged>(f.events()).at(0).pool.spec.nodes == 2);
  // A snapshot is held to the same bound: a pool over it, or asks holding more than it, are refused.
  f.place(kProvider, sell(pool, usd4(20000), 128, T0, T0 + H));
  EngineState s = f.engine().snapshot();
  REQUIRE(s.pools.size() == 1);
  REQUIRE(s.open_orders.size() == 1);
  CHECK_NOTHROW(Engine::restore(Fixture::default_config(), s));
  EngineState big_pool = s;
  big_pool.pools[0].spec.nodes = 15'625'001;
  CHECK_THROWS_AS(Engine::restore(Fixture::default_config(), big_pool), std::invalid_argument);
  EngineState big_ask = s;
  big_ask.open_orders[0].free = Steps(Seconds(T0), Seconds(T0 + H), 1'000'000'001);
  CHECK_THROWS_AS(Engine::restore(Fixture::default_config(), big_ask), std::invalid_argument);
}

TEST_CASE("retire only when nothing is open on the pool", "[pools]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  f.run(kProvider, Cancel{ask});
  f.run(kProvider, RetirePool{pool});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::pool_busy);  // the lease
  f.advance(H);
  f.tick();
  f.run(kProvider, RetirePool{pool});
  CHECK(of_type<PoolChanged>(f.events()).at(0).pool.retired);
  const OrderId late = f.place(kProvider, sell(pool, usd4(20000), 8, T0 + H, T0 + 10 * H));
  CHECK(f.order(late).reason == Reason::not_found);
}

TEST_CASE("pool capacity splits leased, offered and unallocated GPUs over a window", "[pools]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);  // 16
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_window(usd4(20000), 4, T0 + H, T0 + 2 * H));
  const auto cap = f.engine().pool_capacity(pool, Seconds(T0), Seconds(T0 + 12 * H));
  REQUIRE(cap);
  CHECK(cap->leased.at(Seconds(T0 + H)) == 4);
  CHECK(cap->offered.at(Seconds(T0 + H)) == 4);
  CHECK(cap->offered.at(Seconds(T0)) == 8);
  CHECK(cap->unallocated.at(Seconds(T0 + H)) == 8);
  CHECK(cap->unallocated.at(Seconds(T0 + 11 * H)) == 16);
}
