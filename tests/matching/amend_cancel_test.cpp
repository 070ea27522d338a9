// Cancel, cancel-all and amend (lower quantity keeps priority; a new price loses it).
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("cancel ends an open order, others' and unknown orders are not found", "[cancel]") {
  Fixture f;
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(20000), 4, H));
  f.run(kBuyer2, Cancel{bid});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::not_found);
  f.run(kBuyer, Cancel{bid});
  CHECK(f.status(bid) == OrderStatus::cancelled);
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).bids.empty());
  f.run(kBuyer, Cancel{bid});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::not_found);
}

TEST_CASE("cancel-all cancels an account's open orders, optionally in one market", "[cancel]") {
  Fixture f;
  const OrderId a = f.place(kBuyer, buy_duration(usd4(20000), 4, H));
  const OrderId b = f.place(kBuyer, buy_duration(usd4(20000), 4, H, kA100));
  const OrderId other = f.place(kBuyer2, buy_duration(usd4(20000), 4, H));
  f.run(kBuyer, CancelAll{kA100});
  CHECK(f.status(a) == OrderStatus::open);
  CHECK(f.status(b) == OrderStatus::cancelled);
  f.run(kBuyer, CancelAll{});
  CHECK(f.status(a) == OrderStatus::cancelled);
  CHECK(f.status(other) == OrderStatus::open);
  CHECK(f.engine().open_orders(kBuyer).empty());
}

TEST_CASE("lowering quantity keeps time priority", "[amend]") {
  Fixture f;
  const OrderId first = f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  const OrderId second = f.place(kBuyer2, buy_duration(usd4(20000), 8, H));
  f.run(kBuyer, Amend{first, Qty(4), std::nullopt});
  CHECK(f.order(first).remaining == Qty(4));
  CHECK(f.engine().depth(kH100, Bucket::spot(), 10).bids == std::vector<Level>{{usd4(20000), Qty(12)}});
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 4, T0, T0 + 10 * H));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].buy_order == first);
  (void)second;
}

TEST_CASE("a new price loses time priority", "[amend]") {
  Fixture f;
  const OrderId first = f.place(kBuyer, buy_duration(usd4(19000), 8, H));
  const OrderId second = f.place(kBuyer2, buy_duration(usd4(20000), 8, H));
  f.run(kBuyer, Amend{first, std::nullopt, usd4(20000)});
  CHECK(f.order(first).priority == 3);
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].buy_order == second);
}

TEST_CASE("an amended price that crosses trades at once as the incoming order", "[amend]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(19000), 8, H));
  f.run(kBuyer, Amend{bid, std::nullopt, usd4(20500)});
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].price == usd4(20000));
  CHECK(trades_of(f.events())[0].taker == Side::buy);
  CHECK(f.status(bid) == OrderStatus::filled);
}

TEST_CASE("amend rules: no raising quantity, lots, ticks, post_only", "[amend]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(19000), 8, H);
  b.min_chunk = Qty(4);
  b.post_only = true;
  const OrderId bid = f.place(kBuyer, b);
  auto reason = [&](Amend a) {
    f.run(kBuyer, a);
    const auto r = of_type<CommandRejected>(f.events());
    return r.empty() ? Reason::none : r[0].reason;
  };
  CHECK(reason(Amend{bid, Qty(12), std::nullopt}) == Reason::invalid_amend);
  CHECK(reason(Amend{bid, Qty(6), std::nullopt}) == Reason::quantity_not_multiple_of_chunk);
  CHECK(reason(Amend{bid, std::nullopt, Price(1'900'050)}) == Reason::off_tick);
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  CHECK(reason(Amend{bid, std::nullopt, usd4(20000)}) == Reason::would_take);
  CHECK(f.order(bid).request.price == usd4(19000));
}

TEST_CASE("lowering an ask's quantity cuts its free capacity and reports the cut as cancelled", "[amend]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_window(usd4(20000), 6, T0, T0 + H));
  f.run(kProvider, Amend{ask, Qty(4), std::nullopt});
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::invalid_amend);  // only 2 free in hour 1
  f.run(kProvider, Amend{ask, Qty(6), std::nullopt});
  const Order& o = f.order(ask);
  CHECK(o.request.quantity == Qty(6));
  CHECK(o.cancelled_gpu_seconds == 2 * 10 * H);
  // Hour 1: 2 free - 2 cut = 0; after it 8 - 2 = 6.
  CHECK(o.free == Steps(Seconds(T0 + H), Seconds(T0 + 10 * H), 6));
}

TEST_CASE("an amend must leave an ask something to sell: nothing left is a cancel", "[amend]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId ask = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_window(usd4(20000), 4, T0, T0 + 10 * H));  // 4 of the 8 GPUs for the whole window
  f.run(kProvider, Amend{ask, Qty(4), std::nullopt});  // the cut is free, but nothing would be left
  REQUIRE(of_type<CommandRejected>(f.events()).size() == 1);
  CHECK(of_type<CommandRejected>(f.events())[0].reason == Reason::invalid_amend);
  CHECK(f.order(ask).request.quantity == Qty(8));
  f.run(kProvider, Amend{ask, Qty(5), std::nullopt});  // leaves 1 GPU for the whole window
  CHECK(of_type<CommandRejected>(f.events()).empty());
  CHECK(f.order(ask).free == Steps(Seconds(T0), Seconds(T0 + 10 * H), 1));
  CHECK(f.status(ask) == OrderStatus::partially_filled);
}
