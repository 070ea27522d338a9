// Exposure limits: open GPUs, open notional (bids plus what leases still owe), open orders.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("the default limit of 10,000 open GPUs", "[limits]") {
  Fixture f;
  f.place(kBuyer, buy_duration(usd4(1), 6000, H));
  const OrderId over = f.place(kBuyer, buy_duration(usd4(1), 4001, H));
  CHECK(f.order(over).reason == Reason::exposure_limit);
  const OrderId fits = f.place(kBuyer, buy_duration(usd4(1), 4000, H));
  CHECK(f.status(fits) == OrderStatus::open);
}

TEST_CASE("open notional counts bids and what leases still owe", "[limits]") {
  Fixture f;
  Limits l;
  l.max_open_notional = 100'000'000;  // USD 100
  f.run(kAdmin, SetLimits{kBuyer, l});
  CHECK(of_type<LimitsChanged>(f.events()).size() == 1);
  const PoolId pool = f.add_pool(kProvider);
  f.place(kProvider, sell(pool, usd4(10000), 8, T0, T0 + 10 * D));
  // 1.00 x 8 x 10 h = 80 USD: fills, the lease owes 80.
  f.place(kBuyer, buy_duration(usd4(10000), 8, 10 * H));
  CHECK(trades_of(f.events()).size() == 1);
  // 1.00 x 2 x 11 h = 22 USD > 20 left.
  const OrderId over = f.place(kBuyer, buy_window(usd4(10000), 2, T0 + 20 * H, T0 + 31 * H));
  CHECK(f.order(over).reason == Reason::exposure_limit);
  const OrderId fits = f.place(kBuyer, buy_window(usd4(10000), 2, T0 + 20 * H, T0 + 30 * H));
  CHECK(f.status(fits) != OrderStatus::rejected);
}

TEST_CASE("the open-orders limit counts both sides", "[limits]") {
  Fixture f;
  Limits l;
  l.max_open_orders = 2;
  f.run(kAdmin, SetLimits{kProvider, l});
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 4));
  f.place(kProvider, sell(pool, usd4(20000), 1, T0, T0 + H));
  f.place(kProvider, buy_duration(usd4(10000), 1, H));
  const OrderId third = f.place(kProvider, sell(pool, usd4(20000), 1, T0, T0 + H));
  CHECK(f.order(third).reason == Reason::exposure_limit);
}
