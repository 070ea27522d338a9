// Price-time priority on effective prices; trades at the resting order's price.
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("an incoming bid meets asks cheapest first, then by arrival", "[price_time]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));  // 32 GPUs
  const OrderId a1 = f.place(kProvider, sell(pool, usd4(21000), 8, T0, T0 + 10 * H));
  const OrderId a2 = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const OrderId a3 = f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(20500), 12, H));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 2);
  CHECK(trades[0].sell_order == a2);
  CHECK(trades[0].quantity == Qty(8));
  CHECK(trades[0].price == usd4(20000));  // the resting ask's price, not the bid's 2.05
  CHECK(trades[1].sell_order == a3);
  CHECK(trades[1].quantity == Qty(4));
  CHECK(trades[0].start == Seconds(T0));
  CHECK(trades[0].end == Seconds(T0 + H));
  CHECK(trades[0].taker == Side::buy);
  CHECK(f.status(bid) == OrderStatus::filled);
  CHECK(f.status(a1) == OrderStatus::open);
  CHECK(f.status(a2) == OrderStatus::partially_filled);  // 8 GPUs left for 9 of its 10 hours
}

TEST_CASE("an incoming ask meets bids highest first and trades at the bid's price", "[price_time]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId low = f.place(kBuyer, buy_duration(usd4(22000), 4, H));
  const OrderId high1 = f.place(kBuyer, buy_duration(usd4(25000), 4, H));
  const OrderId high2 = f.place(kBuyer2, buy_duration(usd4(25000), 4, H));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 2 * H));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 2);
  CHECK(trades[0].buy_order == high1);
  CHECK(trades[1].buy_order == high2);
  CHECK(trades[0].price == usd4(25000));
  CHECK(trades[0].taker == Side::sell);
  CHECK(f.status(low) == OrderStatus::open);
}

TEST_CASE("no trade when the bid is below the ask", "[price_time]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 2 * H));
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(19999), 8, H));
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(bid) == OrderStatus::open);
}

TEST_CASE("each trade creates a lease that owes price x GPUs x hours", "[price_time]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kBuyer, buy_duration(usd4(20000), 8, 3 * H));
  const auto leases = of_type<LeaseChanged>(f.events());
  REQUIRE(leases.size() == 1);
  const Lease& l = leases[0].lease;
  CHECK(l.buyer == kBuyer);
  CHECK(l.provider == kProvider);
  CHECK(l.status == LeaseStatus::active);  // starts now
  CHECK(l.quantity == Qty(8));
  CHECK(l.owed == 48'000'000);  // 2.00 x 8 x 3 h = 48 USD
  CHECK(trades_of(f.events())[0].lease == l.id);
  CHECK(trades_of(f.events())[0].bucket == Bucket::spot());
}

TEST_CASE("a forward trade reserves capacity in the month bucket of its start", "[price_time]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const std::int64_t feb = T0 + 31 * D;  // 2027-02-01
  f.place(kProvider, sell(pool, usd4(20000), 8, feb, feb + 10 * D));
  f.place(kBuyer, buy_window(usd4(20000), 8, feb, feb + D));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].bucket == Bucket{202702});
  CHECK(to_string(trades[0].bucket) == "2027-02");
  CHECK(of_type<LeaseChanged>(f.events())[0].lease.status == LeaseStatus::reserved);
}

TEST_CASE("cost rounds half to even once", "[price_time]") {
  // 0.0001 USD/h x 1 GPU x 18 s = 100 x 18 / 3600 = 0.5 micro-dollars -> 0 (even)
  CHECK(cost(Price(100), Qty(1), Seconds(18)) == 0);
  // x 54 s = 1.5 -> 2
  CHECK(cost(Price(100), Qty(1), Seconds(54)) == 2);
  // 2.05 USD/h x 3 GPUs x 1 s = 1708.33 -> 1708
  CHECK(cost(Price(2'050'000), Qty(3), Seconds(1)) == 1708);
}

TEST_CASE("div_half_even rounds half to even in and beyond 64 bits", "[price_time]") {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  CHECK(div_half_even(5, 2) == 2);
  CHECK(div_half_even(7, 2) == 4);
  CHECK(div_half_even(-5, 2) == -2);
  CHECK(div_half_even(-7, 2) == -4);
  CHECK(div_half_even(-1, 3) == 0);
  CHECK(div_half_even(-2, 3) == -1);
  CHECK(div_half_even(5399, 3600) == 1);
  CHECK(div_half_even(5400, 3600) == 2);
  CHECK(div_half_even(-5400, 3600) == -2);
  CHECK(div_half_even(kMax, 1) == kMax);
  CHECK(div_half_even(kMin, 1) == kMin);
  CHECK(div_half_even(kMin, 2) == kMin / 2);
  CHECK(div_half_even(kMax, kMax) == 1);
  CHECK(div_half_even(kMax / 2, kMax) == 0);      // just under a half
  CHECK(div_half_even(kMax / 2 + 1, kMax) == 1);  // just over
  // Beyond 64 bits (the 128-bit path): 2^64 + 1 over 2 is a half above 2^63, rounded to the even 2^63.
  const Int128 two64 = static_cast<Int128>(1) << 64;
  CHECK(div_half_even(two64 + 1, 2) == static_cast<Int128>(1) << 63);
  CHECK(div_half_even(two64 + 3, 2) == (static_cast<Int128>(1) << 63) + 2);
  CHECK(div_half_even(-(two64 + 3), 2) == -(static_cast<Int128>(1) << 63) - 2);
  CHECK(div_half_even(two64 * 5, two64 * 2) == 2);
  CHECK(div_half_even(two64 * 7, two64 * 2) == 4);
}

TEST_CASE("a quote is a dry run of a buy order", "[price_time][quote]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  f.place(kProvider, sell(pool, usd4(21000), 8, T0, T0 + 10 * H));
  const std::uint64_t before = f.engine().digest();
  const auto fills = f.engine().quote(buy_duration(usd4(21000), 12, H), kProvider);  // own asks: no STP
  REQUIRE(fills.size() == 2);
  CHECK(fills[0].quantity == Qty(8));
  CHECK(fills[0].price == usd4(20000));
  CHECK(fills[1].quantity == Qty(4));
  CHECK(fills[1].price == usd4(21000));
  CHECK(f.engine().digest() == before);
  OrderRequest fok = buy_duration(usd4(21000), 24, H);
  fok.time_in_force = TimeInForce::fok;
  CHECK(f.engine().quote(fok, kBuyer).empty());
}

TEST_CASE("an ask with nothing free now still meets later fixed-window bids", "[price_time]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider);
  const OrderId spot_a = f.place(kBuyer, buy_duration(usd4(25000), 8, H));
  const OrderId spot_b = f.place(kBuyer2, buy_duration(usd4(24000), 8, H));
  const OrderId forward = f.place(kBuyer2, buy_window(usd4(23000), 8, T0 + 2 * H, T0 + 3 * H));
  f.place(kProvider, sell(pool, usd4(20000), 8, T0, T0 + 10 * H));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 2);
  CHECK(trades[0].buy_order == spot_a);   // [T0, T0 + 1 h) at 2.50
  CHECK(trades[0].price == usd4(25000));
  CHECK(trades[1].buy_order == forward);  // [T0 + 2 h, T0 + 3 h) at 2.30
  CHECK(trades[1].start == Seconds(T0 + 2 * H));
  CHECK(f.status(spot_b) == OrderStatus::open);  // nothing free in the first hour
}

TEST_CASE("a fixed-window bid that meets many asks takes them cheapest first, then by arrival", "[price_time]") {
  // 12 asks (a bid of 12 GPUs, and of 3: more asks that surely fill than it needs) and 20 (more than a walk's
  // few first picks, and a bid of 20 GPUs): the asks are taken in price-time order, as many as the bid needs.
  for (const auto& [n, qty] : {std::pair{12, 12}, std::pair{12, 3}, std::pair{20, 20}}) {
    Fixture f;
    const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));  // 32 GPUs
    std::vector<std::pair<std::int64_t, OrderId>> asks;            // (price, id) in arrival order
    for (int i = 0; i < n; ++i) {
      const std::int64_t price = 20000 + (i * 7 % 5) * 100;  // five prices, each several times, out of order
      asks.emplace_back(price, f.place(kProvider, sell(pool, usd4(price), 1, T0, T0 + 10 * H)));
    }
    std::stable_sort(asks.begin(), asks.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    const OrderId bid = f.place(kBuyer, buy_window(usd4(21000), qty, T0 + H, T0 + 2 * H));
    const auto trades = trades_of(f.events());
    REQUIRE(trades.size() == static_cast<std::size_t>(qty));
    for (int i = 0; i < qty; ++i) {
      CHECK(trades[static_cast<std::size_t>(i)].sell_order == asks[static_cast<std::size_t>(i)].second);
      CHECK(trades[static_cast<std::size_t>(i)].price == usd4(asks[static_cast<std::size_t>(i)].first));
    }
    CHECK(f.status(bid) == OrderStatus::filled);
  }
}
