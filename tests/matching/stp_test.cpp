// Self-trade prevention in its three modes, and in all-or-none walks.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {
// One account that is both provider and buyer.
const AccountId kBoth{5};
}  // namespace

TEST_CASE("cancel_newest (default) rejects an incoming order that meets its own first", "[stp]") {
  Fixture f;
  const PoolId pool = f.add_pool(kBoth);
  const OrderId own = f.place(kBoth, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const OrderId bid = f.place(kBoth, buy_duration(usd4(20000), 8, H));
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(bid) == OrderStatus::rejected);
  CHECK(f.order(bid).reason == Reason::self_trade);
  CHECK(f.status(own) == OrderStatus::open);
}

TEST_CASE("cancel_newest after some fills cancels the rest", "[stp]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  const PoolId mine = f.add_pool(kBoth, pool_spec(8, 4));
  f.place(kProvider, sell(pool, usd4(19000), 4, T0, T0 + 10 * H));
  f.place(kBoth, sell(mine, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const OrderId bid = f.place(kBoth, buy_duration(usd4(21000), 12, H));
  CHECK(trades_of(f.events()).size() == 1);
  CHECK(f.status(bid) == OrderStatus::cancelled);
  CHECK(f.order(bid).reason == Reason::self_trade);
  CHECK(f.order(bid).filled == Qty(4));
}

TEST_CASE("cancel_oldest cancels the resting order and goes on", "[stp]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  const PoolId mine = f.add_pool(kBoth, pool_spec(8, 4));
  const OrderId own = f.place(kBoth, sell(mine, usd4(19000), 8, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  OrderRequest b = buy_duration(usd4(21000), 8, H);
  b.stp = StpMode::cancel_oldest;
  const OrderId bid = f.place(kBoth, b);
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].seller == kProvider);
  CHECK(f.status(own) == OrderStatus::cancelled);
  CHECK(f.order(own).reason == Reason::self_trade);
  CHECK(f.status(bid) == OrderStatus::filled);
  // The resting order's cancel comes where the walk met it: before the trade.
  const auto done = of_type<OrderDone>(f.events());
  REQUIRE(done.size() == 2);
  CHECK(done[0].order.id == own);
}

TEST_CASE("cancel_both cancels both", "[stp]") {
  Fixture f;
  const PoolId mine = f.add_pool(kBoth);
  const OrderId own = f.place(kBoth, sell(mine, usd4(19000), 8, T0, T0 + 10 * H));
  OrderRequest b = buy_duration(usd4(21000), 8, H);
  b.stp = StpMode::cancel_both;
  const OrderId bid = f.place(kBoth, b);
  CHECK(f.status(own) == OrderStatus::cancelled);
  CHECK(f.status(bid) == OrderStatus::rejected);
  CHECK(f.order(bid).reason == Reason::self_trade);
}

TEST_CASE("STP ignores own orders that are not eligible or do not cross", "[stp]") {
  Fixture f;
  const PoolId mine = f.add_pool(kBoth);
  const PoolId pool = f.add_pool(kProvider);
  f.place(kBoth, sell(mine, usd4(25000), 8, T0, T0 + 10 * H));  // does not cross
  f.place(kBoth, sell(mine, usd4(19000), 8, T0 + 5 * H, T0 + 10 * H));  // starts later: not eligible
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const OrderId bid = f.place(kBoth, buy_duration(usd4(21000), 8, H));
  CHECK(trades_of(f.events()).size() == 1);
  CHECK(f.status(bid) == OrderStatus::filled);
}

TEST_CASE("an all-or-none walk that meets an own order rejects the incoming order", "[stp][fok]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const PoolId mine = f.add_pool(kBoth);
  f.place(kProvider, sell(pool, usd4(19000), 4, T0, T0 + 10 * H));
  const OrderId own = f.place(kBoth, sell(mine, usd4(20000), 8, T0, T0 + 10 * H));
  OrderRequest b = buy_duration(usd4(21000), 8, H);
  b.time_in_force = TimeInForce::fok;
  b.stp = StpMode::cancel_oldest;  // the mode does not matter in an all-or-none walk
  const OrderId bid = f.place(kBoth, b);
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(bid) == OrderStatus::rejected);
  CHECK(f.order(bid).reason == Reason::self_trade);
  CHECK(f.status(own) == OrderStatus::open);
}

TEST_CASE("an incoming ask applies STP against own bids", "[stp]") {
  Fixture f;
  const PoolId mine = f.add_pool(kBoth);
  const OrderId own_bid = f.place(kBoth, buy_duration(usd4(21000), 8, H));
  const OrderId other_bid = f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  OrderRequest a = sell(mine, usd4(20000), 8, T0, T0 + 10 * H);
  a.stp = StpMode::cancel_oldest;
  f.place(kBoth, a);
  CHECK(f.status(own_bid) == OrderStatus::cancelled);
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].buy_order == other_bid);
}
