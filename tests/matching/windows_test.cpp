// Ask windows: clipping at entry, sub-windows, min_duration, step-function free capacity, accounting.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("an ask's window is clipped to now at entry", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0 - H, T0 + 2 * H));
  const Order& o = f.order(ask);
  CHECK(o.window_start == Seconds(T0));
  CHECK(o.window_end == Seconds(T0 + 2 * H));
  CHECK(o.total_gpu_seconds == 8 * 2 * H);
  CHECK(o.free_gpu_seconds == 8 * 2 * H);
}

TEST_CASE("an ask whose window has ended is rejected", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0 - 2 * H, T0));
  CHECK(f.status(ask) == OrderStatus::rejected);
  CHECK(f.order(ask).reason == Reason::window_in_past);
  CHECK(of_type<OrderRejected>(f.events()).size() == 1);
}

TEST_CASE("a fixed-window bid that starts in the past is rejected", "[windows]") {
  Fixture f;
  const OrderId bid = f.place(kBuyer, buy_window(usd4(20000), 8, T0 - 1, T0 + H));
  CHECK(f.order(bid).reason == Reason::window_in_past);
  const OrderId now_bid = f.place(kBuyer, buy_window(usd4(20000), 8, T0, T0 + H));
  CHECK(f.status(now_bid) == OrderStatus::open);
}

TEST_CASE("a bid's window must lie inside the ask's window", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0 + H, T0 + 5 * H));
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + 4 * H, T0 + 6 * H));
  CHECK(trades_of(f.events()).empty());
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + 2 * H, T0 + 4 * H));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].start == Seconds(T0 + 2 * H));
  CHECK(trades_of(f.events())[0].end == Seconds(T0 + 4 * H));
}

TEST_CASE("min_duration: a shorter window does not match", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  OrderRequest a = sell(pool, usd4(20000), 8, T0, T0 + 10 * H);
  a.min_duration = Seconds(2 * H);
  f.place(kProvider, a);
  const OrderId short_bid = f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  CHECK(trades_of(f.events()).empty());
  f.run(kBuyer, Cancel{short_bid});
  f.place(kBuyer, buy_duration(usd4(20000), 8, 2 * H));
  CHECK(trades_of(f.events()).size() == 1);
}

TEST_CASE("free capacity is a step function of time", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + 2 * H, T0 + 4 * H));
  const Order& o = f.order(ask);
  REQUIRE(o.free.pieces().size() == 2);
  CHECK(o.free.pieces()[0] == Step{Seconds(T0), Seconds(T0 + 2 * H), 8});
  CHECK(o.free.pieces()[1] == Step{Seconds(T0 + 4 * H), Seconds(T0 + 10 * H), 8});
  CHECK(o.filled_gpu_seconds == 8 * 2 * H);
  CHECK(o.status == OrderStatus::partially_filled);
  // A window overlapping the sold part cannot match; one after it can.
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + 1 * H, T0 + 3 * H));
  CHECK(trades_of(f.events()).empty());
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + 4 * H, T0 + 6 * H));
  CHECK(trades_of(f.events()).size() == 1);
}

TEST_CASE("an ask is filled when no piece of min_duration and one lot remains", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  OrderRequest a = sell(pool, usd4(20000), 8, T0, T0 + 3 * H);
  a.min_duration = Seconds(2 * H);
  const OrderId ask = f.place(kProvider, a);
  f.place(kBuyer, buy_window(usd4(20000), 8, T0 + H, T0 + 3 * H));
  const Order& o = f.order(ask);
  CHECK(o.status == OrderStatus::filled);
  // The one unsellable hour left over is reported as cancelled (it has not passed, so it is not lapsed).
  CHECK(o.filled_gpu_seconds == 8 * 2 * H);
  CHECK(o.lapsed_gpu_seconds == 0);
  CHECK(o.cancelled_gpu_seconds == 8 * H);
  CHECK(o.free_gpu_seconds == 0);
  CHECK(o.filled_gpu_seconds + o.lapsed_gpu_seconds + o.cancelled_gpu_seconds == o.total_gpu_seconds);
}

TEST_CASE("hours that pass unsold are lapsed, a cancel reports the rest as cancelled", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  f.advance(3 * H);
  f.run(kProvider, Cancel{ask});
  const Order& o = f.order(ask);
  CHECK(o.status == OrderStatus::cancelled);
  CHECK(o.lapsed_gpu_seconds == 4 * 3 * H);
  CHECK(o.cancelled_gpu_seconds == 4 * 7 * H);
  CHECK(o.free_gpu_seconds == 0);
}

TEST_CASE("an ask expires when its window ends", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 2 * H));
  f.advance(2 * H - 1);
  f.tick();
  CHECK(f.engine().order(ask) != nullptr);
  f.advance(1);
  f.tick();
  CHECK(f.status(ask) == OrderStatus::expired);
  CHECK(f.order(ask).lapsed_gpu_seconds == 4 * 2 * H);
  CHECK(f.engine().order(ask) == nullptr);
}

TEST_CASE("asks on one pool never promise more than the pool has", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 2));  // 16 GPUs
  f.place(kProvider, sell(pool, usd4(20000), 16, T0, T0 + 4 * H));
  const OrderId over = f.place(kProvider, sell(pool, usd4(20000), 1, T0 + 3 * H, T0 + 5 * H));
  CHECK(f.order(over).reason == Reason::insufficient_pool_capacity);
  const OrderId after = f.place(kProvider, sell(pool, usd4(20000), 16, T0 + 4 * H, T0 + 5 * H));
  CHECK(f.status(after) == OrderStatus::open);
}

TEST_CASE("sold capacity stays committed: a lease plus the ask's rest fit the pool", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1));  // 8 GPUs
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 4 * H));
  f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  f.run(kProvider, Cancel{ask});
  // The lease still holds 8 GPUs for the first hour; after it the pool is free again.
  const OrderId during = f.place(kProvider, sell(pool, usd4(20000), 1, T0, T0 + 2 * H));
  CHECK(f.order(during).reason == Reason::insufficient_pool_capacity);
  const OrderId later = f.place(kProvider, sell(pool, usd4(20000), 8, T0 + H, T0 + 2 * H));
  CHECK(f.status(later) == OrderStatus::open);
}

TEST_CASE("time alone: an ask's start arrives while a spot bid rests", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0 + H, T0 + 5 * H));
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(21000), 8, H));
  CHECK(trades_of(f.events()).empty());
  f.advance(H - 1);
  f.tick();
  CHECK(trades_of(f.events()).empty());
  f.advance(1);
  f.tick();
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].price == usd4(21000));  // the ask is matched as the incoming order
  CHECK(trades[0].taker == Side::sell);
  CHECK(trades[0].start == Seconds(T0 + H));
  CHECK(f.status(bid) == OrderStatus::filled);
  CHECK(f.status(ask) == OrderStatus::partially_filled);
}

TEST_CASE("time alone: capacity that frees up later is matched when it arrives", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_window(usd4(20000), 8, T0, T0 + H));
  const OrderId spot = f.place(kBuyer2, buy_duration(usd4(20000), 8, H));
  CHECK(trades_of(f.events()).empty());
  f.advance(H);
  f.tick();
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].buy_order == spot);
  CHECK(trades[0].start == Seconds(T0 + H));
  CHECK(trades[0].end == Seconds(T0 + 2 * H));
}

// The free-run index (built by a market's first fixed-window bid) files a run by its start and end week in a
// table that starts at the week it was built in and spans 64 weeks of ends: runs that started before that week,
// that end later than 64 weeks after their start, or that start years ahead sit at its edges, and
// fixed-window bids must still find them (check_invariants also checks every run's cell after each command).
TEST_CASE("fixed-window bids find asks at the edges of the free-run index", "[windows]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId long_ask = f.place(kProvider, sell(pool, usd4(20000), 1, T0, T0 + 800 * D));
  const OrderId early_ask = f.place(kProvider, sell(pool, usd4(19000), 1, T0, T0 + 60 * D));
  const OrderId far_ask = f.place(kProvider, sell(pool, usd4(21000), 1, T0 + 1100 * D, T0 + 1200 * D));
  f.advance(21 * D);  // the index is built three weeks after the asks started
  const auto sold_by = [&](std::int64_t start) {
    f.place(kBuyer, buy_window(usd4(25000), 1, start, start + D));
    const auto trades = trades_of(f.events());
    REQUIRE(trades.size() == 1);
    CHECK(trades[0].start == Seconds(start));
    return trades[0].sell_order;
  };
  CHECK(sold_by(T0 + 700 * D) == long_ask);   // 100 weeks after its start: the row's last cell
  CHECK(sold_by(T0 + 30 * D) == early_ask);   // started before the index's first week: row 0
  CHECK(sold_by(T0 + 1150 * D) == far_ask);   // a row ~160 weeks ahead
  CHECK(sold_by(T0 + 30 * D) == long_ask);    // the early ask's one GPU is taken there
  CHECK(sold_by(T0 + 2 * 365 * D) == long_ask);
  f.advance(60 * D);
  CHECK(sold_by(T0 + 90 * D) == long_ask);    // a window that starts after the early ask's end
}
