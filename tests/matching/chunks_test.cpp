// Lots: quantities are multiples of min_chunk; fills are multiples of lcm(bid's, ask's min_chunk).
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("a quantity that is not a multiple of min_chunk is rejected", "[chunks]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(20000), 6, H);
  b.min_chunk = Qty(4);
  const OrderId bid = f.place(kBuyer, b);
  CHECK(f.status(bid) == OrderStatus::rejected);
  CHECK(f.order(bid).reason == Reason::quantity_not_multiple_of_chunk);

  const PoolId pool = f.add_pool(kProvider);
  OrderRequest a = sell(pool, usd4(20000), 10, T0, T0 + H);
  a.min_chunk = Qty(4);
  CHECK(f.order(f.place(kProvider, a)).reason == Reason::quantity_not_multiple_of_chunk);
}

TEST_CASE("fills are multiples of the lcm of both lots", "[chunks]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  OrderRequest a = sell(pool, usd4(20000), 9, T0, T0 + 4 * H);
  a.min_chunk = Qty(3);
  f.place(kProvider, a);
  OrderRequest b = buy_duration(usd4(20000), 8, H);
  b.min_chunk = Qty(2);
  const OrderId bid = f.place(kBuyer, b);
  // lcm(2, 3) = 6: min(8 wanted, 9 free) = 8 -> 6.
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].quantity == Qty(6));
  CHECK(f.order(bid).remaining == Qty(2));
  CHECK(f.status(bid) == OrderStatus::partially_filled);
}

TEST_CASE("no fill when the lcm lot does not fit", "[chunks]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  OrderRequest a = sell(pool, usd4(20000), 6, T0, T0 + 4 * H);
  a.min_chunk = Qty(3);
  f.place(kProvider, a);
  OrderRequest b = buy_duration(usd4(20000), 4, H);
  b.min_chunk = Qty(4);  // lcm 12 > 6 free and > 4 wanted
  f.place(kBuyer, b);
  CHECK(trades_of(f.events()).empty());
}

TEST_CASE("a bid takes whole lots across asks", "[chunks]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  OrderRequest a1 = sell(pool, usd4(19000), 4, T0, T0 + 4 * H);
  a1.min_chunk = Qty(2);
  f.place(kProvider, a1);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 4 * H));
  OrderRequest b = buy_duration(usd4(20000), 10, H);
  b.min_chunk = Qty(2);
  f.place(kBuyer, b);
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 2);
  CHECK(trades[0].quantity == Qty(4));
  CHECK(trades[1].quantity == Qty(6));
}

TEST_CASE("the book shows an ask's free capacity rounded down to its lot", "[chunks]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 2));
  OrderRequest a = sell(pool, usd4(20000), 16, T0, T0 + 4 * H);
  a.min_chunk = Qty(8);  // whole nodes
  f.place(kProvider, a);
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).asks == std::vector<Level>{{usd4(20000), Qty(16)}});
  OrderRequest b = buy_duration(usd4(20000), 8, H);
  b.min_chunk = Qty(1);
  f.place(kBuyer, b);
  // 8 of 16 sold for the first hour: the view shows 8 (what it can sell for min_duration from now).
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).asks == std::vector<Level>{{usd4(20000), Qty(8)}});
}
