// Time in force: gtc, gtd, ioc, fok, post_only, and the expiry of fixed-window bids.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("gtc rests until filled", "[tif][gtc]") {
  Fixture f;
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  f.advance(30 * D);
  f.tick();
  CHECK(f.engine().order(bid) != nullptr);
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0 + 30 * D, T0 + 31 * D));
  CHECK(f.status(bid) == OrderStatus::filled);
}

TEST_CASE("a fixed-window gtc bid expires when its start passes", "[tif][gtc]") {
  Fixture f;
  const OrderId bid = f.place(kBuyer, buy_window(usd4(20000), 8, T0 + H, T0 + 2 * H));
  f.advance(H);
  f.tick();
  CHECK(f.status(bid) == OrderStatus::open);  // start == now: still live
  f.advance(1);
  f.tick();
  CHECK(f.status(bid) == OrderStatus::expired);
  CHECK(f.order(bid).reason == Reason::expired);
}

TEST_CASE("gtd expires at expire_at", "[tif][gtd]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(20000), 8, H);
  b.time_in_force = TimeInForce::gtd;
  b.expire_at = Seconds(T0 + 600);
  const OrderId bid = f.place(kBuyer, b);
  f.advance(599);
  f.tick();
  CHECK(f.status(bid) == OrderStatus::open);
  f.advance(1);
  const auto& ev = f.tick();
  CHECK(f.status(bid) == OrderStatus::expired);
  REQUIRE(of_type<OrderDone>(ev).size() == 1);
  // The expiry applies before the command's own work: an ask arriving later does not meet it.
  f.advance(100);
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0 + 700, T0 + 10 * H));
  CHECK(trades_of(f.events()).empty());
}

TEST_CASE("gtd that arrives already expired is accepted then expired", "[tif][gtd]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(20000), 8, H);
  b.time_in_force = TimeInForce::gtd;
  b.expire_at = Seconds(T0);
  const OrderId bid = f.place(kBuyer, b);
  CHECK(of_type<OrderAccepted>(f.events()).size() == 1);
  CHECK(f.status(bid) == OrderStatus::expired);
}

TEST_CASE("gtd sells expire at expire_at too", "[tif][gtd]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  OrderRequest a = sell(pool, usd4(20000), 8, T0, T0 + 10 * H);
  a.time_in_force = TimeInForce::gtd;
  a.expire_at = Seconds(T0 + H);
  const OrderId ask = f.place(kProvider, a);
  f.advance(H);
  f.tick();
  CHECK(f.status(ask) == OrderStatus::expired);
  CHECK(f.order(ask).lapsed_gpu_seconds == 8 * H);         // 1 h passed unsold
  CHECK(f.order(ask).cancelled_gpu_seconds == 8 * 9 * H);  // the rest is withdrawn
}

TEST_CASE("ioc fills what it can and cancels the rest", "[tif][ioc]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  OrderRequest b = buy_duration(usd4(20000), 8, H);
  b.time_in_force = TimeInForce::ioc;
  const OrderId bid = f.place(kBuyer, b);
  CHECK(trades_of(f.events()).size() == 1);
  const Order& o = f.order(bid);
  CHECK(o.status == OrderStatus::cancelled);
  CHECK(o.filled == Qty(4));
  CHECK(o.remaining == Qty(4));
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).bids.empty());
}

TEST_CASE("fok fills entirely or not at all", "[tif][fok]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  OrderRequest b = buy_duration(usd4(20000), 8, H);
  b.time_in_force = TimeInForce::fok;
  const OrderId bid = f.place(kBuyer, b);
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(bid) == OrderStatus::cancelled);
  CHECK(f.order(bid).filled == Qty(0));
  CHECK(f.status(ask) == OrderStatus::open);
  f.place(kProvider, sell(pool, usd4(20500), 4, T0, T0 + 10 * H));
  b.price = usd4(20500);
  const OrderId bid2 = f.place(kBuyer, b);
  CHECK(trades_of(f.events()).size() == 2);
  CHECK(f.status(bid2) == OrderStatus::filled);
}

TEST_CASE("post_only is rejected when it would take, rests otherwise", "[tif][post_only]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  OrderRequest b = buy_duration(usd4(20000), 4, H);
  b.post_only = true;
  const OrderId taker = f.place(kBuyer, b);
  CHECK(f.status(taker) == OrderStatus::rejected);
  CHECK(f.order(taker).reason == Reason::would_take);
  CHECK(trades_of(f.events()).empty());
  b.price = usd4(19999);
  const OrderId maker = f.place(kBuyer, b);
  CHECK(f.status(maker) == OrderStatus::open);
}

TEST_CASE("ioc and fok sells", "[tif][ioc][fok]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kBuyer, buy_window(usd4(20000), 8, T0, T0 + H));
  OrderRequest a = sell(pool, usd4(20000), 8, T0, T0 + 2 * H);
  a.time_in_force = TimeInForce::fok;  // would leave [T0+1h, T0+2h) unsold
  const OrderId fok = f.place(kProvider, a);
  CHECK(f.status(fok) == OrderStatus::cancelled);
  CHECK(trades_of(f.events()).empty());
  a.time_in_force = TimeInForce::ioc;
  const OrderId ioc = f.place(kProvider, a);
  CHECK(trades_of(f.events()).size() == 1);
  const Order& o = f.order(ioc);
  CHECK(o.status == OrderStatus::cancelled);
  CHECK(o.filled_gpu_seconds == 8 * H);
  CHECK(o.cancelled_gpu_seconds == 8 * H);
}
