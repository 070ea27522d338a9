// L2 book views per (market, bucket): levels, buckets, constrained bids, sequence numbers.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("levels aggregate by price, bids descending, asks ascending", "[book]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  f.place(kProvider, sell(pool, usd4(21000), 8, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  f.place(kBuyer, buy_duration(usd4(19000), 4, H));
  f.place(kBuyer, buy_duration(usd4(19500), 2, H));
  const Depth d = f.engine().depth(kH100, Bucket::spot(), 10);
  CHECK(d.asks == std::vector<Level>{{usd4(20000), Qty(8)}, {usd4(21000), Qty(8)}});
  CHECK(d.bids == std::vector<Level>{{usd4(19500), Qty(2)}, {usd4(19000), Qty(4)}});
  CHECK(d.sequence == 5);
  CHECK(f.engine().depth(kH100, Bucket::spot(), 1).asks.size() == 1);
}

TEST_CASE("one delta per command and view, carrying every changed level", "[book]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(21000), 4, T0, T0 + 10 * H));
  f.place(kBuyer, buy_duration(usd4(21000), 6, H));  // takes 4 @2.00 and 2 @2.10
  const auto deltas = of_type<BookDelta>(f.events());
  REQUIRE(deltas.size() == 1);
  CHECK(deltas[0].sequence == 3);
  // Both sold for the first hour: neither can sell a 1-second piece from now... the 2.10 ask keeps 2.
  CHECK(deltas[0].changes ==
        LevelChanges{{Side::sell, usd4(20000), Qty(0)}, {Side::sell, usd4(21000), Qty(2)}});
}

TEST_CASE("orders are in exactly one bucket: spot or the month of their start", "[book]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  const std::int64_t mar = T0 + (31 + 28) * D;  // 2027-03-01
  f.place(kProvider, sell(pool, usd4(20000), 4, mar, mar + 10 * D));
  f.place(kBuyer, buy_window(usd4(19000), 4, mar, mar + D));
  f.place(kBuyer, buy_window(usd4(18000), 4, T0 + 900, T0 + H));     // within the spot horizon
  f.place(kBuyer, buy_window(usd4(17000), 4, T0 + 901, T0 + H));     // just outside it
  f.place(kProvider, sell(pool, usd4(22000), 4, T0 + 600, T0 + H));  // an ask is spot once started
  const Bucket march{202703};
  CHECK(f.engine().depth(kH100, march, 10).asks == std::vector<Level>{{usd4(20000), Qty(4)}});
  CHECK(f.engine().depth(kH100, march, 10).bids == std::vector<Level>{{usd4(19000), Qty(4)}});
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).bids == std::vector<Level>{{usd4(18000), Qty(4)}});
  CHECK(f.engine().depth(kH100, Bucket{202701}, 10).bids == std::vector<Level>{{usd4(17000), Qty(4)}});
  CHECK(f.engine().depth(kH100, Bucket{202701}, 10).asks == std::vector<Level>{{usd4(22000), Qty(4)}});
  // Time moves them: one second later the 17000 bid is within the horizon.
  f.advance(1);
  f.tick();
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).bids ==
        std::vector<Level>{{usd4(18000), Qty(4)}, {usd4(17000), Qty(4)}});
  f.advance(599);
  f.tick();
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).asks == std::vector<Level>{{usd4(22000), Qty(4)}});
  CHECK(f.engine().depth(kH100, Bucket{202701}, 10).asks.empty());
}

TEST_CASE("constrained bids are counted apart", "[book]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(30000), 4, H);
  b.constraints.regions = {"DE"};
  f.place(kBuyer, b);
  OrderRequest i = buy_duration(usd4(29000), 2, H);
  i.constraints.interruptible = true;  // not an attribute constraint
  i.min_chunk = Qty(2);
  f.place(kBuyer, i);
  const Depth d = f.engine().depth(kH100, Bucket::spot(), 10);
  CHECK(d.bids == std::vector<Level>{{usd4(29000), Qty(2)}});
  CHECK(d.constrained_bids == ConstrainedBids{1, Qty(4)});
  CHECK(d.sequence == 2);
}

TEST_CASE("an ask's level shows what it can sell for min_duration from now", "[book]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 2));
  OrderRequest a = sell(pool, usd4(20000), 16, T0, T0 + 10 * H);
  a.min_duration = Seconds(2 * H);
  f.place(kProvider, a);
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + H, T0 + 3 * H));
  // Over [now, now + 2 h) 8 GPUs stay free throughout.
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).asks == std::vector<Level>{{usd4(20000), Qty(8)}});
  f.advance(3 * H);
  f.tick();
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).asks == std::vector<Level>{{usd4(20000), Qty(16)}});
  f.advance(5 * H + 1);  // less than 2 h left: nothing to show
  f.tick();
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).asks.empty());
}
