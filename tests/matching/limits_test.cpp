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

// "An order that would exceed one is rejected (exposure_limit)": an amend is refused when it raises the account's
// open notional past the limit, never when it lowers it, even with a higher price while the account is over a
// limit lowered since (a plain cut to 4 x 1.00 x 1 h is let through; so must 4 x 1.30 x 1 h, still lower than 8).
TEST_CASE("an amend that lowers the open notional is never refused for exposure", "[limits][amend]") {
  Fixture f;
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(10000), 8, H));  // 8 x 1.00 x 1 h = 8 USD
  Limits l;
  l.max_open_notional = 5'000'000;  // USD 5: the account is over it now
  f.run(kAdmin, SetLimits{kBuyer, l});
  auto reason = [&](Amend a) {
    f.run(kBuyer, a);
    const auto rejected = of_type<CommandRejected>(f.events());
    return rejected.empty() ? Reason::none : rejected.front().reason;
  };
  // 8 x 1.10 = 8.80 USD: higher than 8 and over 5.
  CHECK(reason(Amend{bid, std::nullopt, usd4(11000)}) == Reason::exposure_limit);
  // 4 x 1.30 = 5.20 USD: over 5 but lower than 8 — accepted, at the new price.
  CHECK(reason(Amend{bid, Qty(4), usd4(13000)}) == Reason::none);
  CHECK(f.order(bid).request.price == usd4(13000));
  CHECK(f.order(bid).remaining == Qty(4));
  // 4 x 1.40 = 5.60 USD: higher than 5.20 and over 5.
  CHECK(reason(Amend{bid, std::nullopt, usd4(14000)}) == Reason::exposure_limit);
  // 3 x 1.60 = 4.80 USD: under the limit.
  CHECK(reason(Amend{bid, Qty(3), usd4(16000)}) == Reason::none);
}
