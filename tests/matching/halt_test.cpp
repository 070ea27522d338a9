// Market halt: new orders rejected, cancels allowed, no trading until resumed.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("a halted market rejects new orders and allows cancels", "[halt]") {
  Fixture f;
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(20000), 4, H));
  f.run(kAdmin, HaltMarket{kH100, true});
  CHECK(of_type<MarketHaltChanged>(f.events()).at(0).halted);
  const OrderId rejected = f.place(kBuyer, buy_duration(usd4(20000), 4, H));
  CHECK(f.order(rejected).reason == Reason::market_halted);
  CHECK(f.status(f.place(kBuyer, buy_duration(usd4(20000), 4, H, kA100))) == OrderStatus::open);
  f.run(kBuyer, Amend{bid, std::nullopt, usd4(21000)});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::market_halted);
  f.run(kBuyer, Cancel{bid});
  CHECK(f.status(bid) == OrderStatus::cancelled);
}

TEST_CASE("time does not trade in a halted market, resuming matches what crossed", "[halt]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0 + H, T0 + 10 * H));
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  f.run(kAdmin, HaltMarket{kH100, true});
  f.advance(H);
  f.tick();
  CHECK(trades_of(f.events()).empty());
  f.run(kAdmin, HaltMarket{kH100, false});
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(f.status(bid) == OrderStatus::filled);
}
