// The provider-funded green discount: effective prices, trade records, re-pricing.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

PoolSpec green_plus_spec() {
  PoolSpec s = pool_spec(8, 2);
  s.energy = EnergyAttributes{1150, 8000, 10000};  // exactly on the green_plus bounds
  return s;
}

PoolSpec green_spec() {
  PoolSpec s = pool_spec(8, 2);
  s.energy = EnergyAttributes{1299, 5001, 39999};  // just inside green's strict bounds
  return s;
}

}  // namespace

TEST_CASE("the default policy classifies on inclusive and strict bounds", "[green]") {
  const GreenPolicy p = GreenPolicy::defaults();
  CHECK(p.classify(EnergyAttributes{1150, 8000, 10000})->tier == GreenTier::green_plus);
  CHECK(p.classify(EnergyAttributes{1151, 8000, 10000})->tier == GreenTier::green);
  CHECK(p.classify(EnergyAttributes{1299, 5001, 39999})->tier == GreenTier::green);
  CHECK(p.classify(EnergyAttributes{1300, 9000, 100}) == nullptr);   // PUE < 1.30 is strict
  CHECK(p.classify(EnergyAttributes{1100, 5000, 100}) == nullptr);   // renewable > 50 % is strict
  CHECK(p.classify(EnergyAttributes{1100, 9000, 40000}) == nullptr); // carbon < 400 is strict
}

TEST_CASE("effective price is the list price less the discount, down to the tick", "[green]") {
  CHECK(discounted(Price(2'000'100), 2000, Price(100)) == Price(1'600'000));  // 1.60008 -> 1.6000
  CHECK(discounted(Price(2'000'000), 1500, Price(100)) == Price(1'700'000));
  CHECK(discounted(Price(2'000'000), 0, Price(100)) == Price(2'000'000));
}

TEST_CASE("unverified green pools get no discount", "[green]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, green_plus_spec());
  CHECK(f.engine().pool(pool)->green_tier == GreenTier::none);
  const OrderId ask = f.place(kProvider, sell(pool, Price(2'000'100), 8, T0, T0 + 10 * H));
  CHECK(f.order(ask).effective_price == Price(2'000'100));
}

TEST_CASE("a verified green pool's trade records price, list price and discount", "[green]") {
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, green_plus_spec());
  f.run(kAdmin, VerifyPool{pool, true, Seconds(T0 + 365 * D), "cert"});
  CHECK(f.engine().pool(pool)->green_tier == GreenTier::green_plus);
  CHECK(f.engine().pool(pool)->green_discount_bps == 2000);
  const OrderId ask = f.place(kProvider, sell(pool, Price(2'000'100), 8, T0, T0 + 10 * H));
  CHECK(f.order(ask).effective_price == Price(1'600'000));
  // A bid at 1.60 crosses the effective price (not the list price).
  f.place(kBuyer, buy_duration(Price(1'600'000), 8, H));
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].price == Price(1'600'000));
  CHECK(trades[0].list_price == Price(2'000'100));
  CHECK(trades[0].green_discount_bps == 2000);
  CHECK(trades[0].green_tier == GreenTier::green_plus);
  CHECK(of_type<LeaseChanged>(f.events())[0].lease.owed == 12'800'000);  // 1.60 x 8 x 1 h
}

TEST_CASE("green asks rank by effective price", "[green]") {
  Fixture f;
  const PoolId plain = f.add_pool(kProvider);
  const PoolId green = f.add_pool(kProvider2, green_spec());
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + 365 * D), "cert"});
  f.place(kProvider, sell(plain, usd4(18000), 8, T0, T0 + 10 * H));
  f.place(kProvider2, sell(green, usd4(20000), 8, T0, T0 + 10 * H));  // effective 1.70
  f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].pool == green);
  CHECK(trades_of(f.events())[0].price == usd4(17000));
}

TEST_CASE("withdrawing verification re-prices open asks and keeps their time priority", "[green]") {
  Fixture f;
  const PoolId green = f.add_pool(kProvider, green_spec());
  const PoolId plain = f.add_pool(kProvider2);
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + 365 * D), "cert"});
  const OrderId g = f.place(kProvider, sell(green, usd4(20000), 8, T0, T0 + 10 * H));  // 1.70
  f.place(kProvider2, sell(plain, usd4(20000), 8, T0, T0 + 10 * H));
  f.run(kAdmin, VerifyPool{green, false, Seconds(0), ""});
  const auto updated = of_type<OrderUpdated>(f.events());
  REQUIRE(updated.size() == 1);
  CHECK(updated[0].order.id == g);
  CHECK(updated[0].order.effective_price == usd4(20000));
  // Same price now; the green ask arrived first and keeps its priority.
  f.place(kBuyer, buy_duration(usd4(20000), 8, H));
  CHECK(trades_of(f.events())[0].sell_order == g);
  CHECK(trades_of(f.events())[0].green_discount_bps == 0);
}

TEST_CASE("a verification's expiry re-prices at the first command after it", "[green]") {
  Fixture f;
  const PoolId green = f.add_pool(kProvider, green_spec());
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + H), "cert"});
  const OrderId g = f.place(kProvider, sell(green, usd4(20000), 8, T0, T0 + 10 * H));
  CHECK(f.order(g).effective_price == usd4(17000));
  f.advance(H);
  const auto& ev = f.tick();
  REQUIRE(of_type<PoolChanged>(ev).size() == 1);
  CHECK(of_type<PoolChanged>(ev)[0].pool.green_tier == GreenTier::none);
  CHECK(f.order(g).effective_price == usd4(20000));
}

TEST_CASE("a re-priced ask that now crosses is matched at once, a post_only one is cancelled", "[green]") {
  Fixture f;
  const PoolId green = f.add_pool(kProvider, green_spec());
  const OrderId a1 = f.place(kProvider, sell(green, usd4(20000), 8, T0, T0 + 10 * H));
  OrderRequest po = sell(green, usd4(20000), 8, T0, T0 + 10 * H);
  po.post_only = true;
  const OrderId a2 = f.place(kProvider, po);
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(18000), 8, H));
  CHECK(trades_of(f.events()).empty());
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + 365 * D), "cert"});  // both asks -> 1.70
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].sell_order == a1);
  CHECK(trades[0].price == usd4(18000));  // the resting bid's price
  CHECK(f.status(bid) == OrderStatus::filled);
  // a2 no longer crosses anything (the bid is filled), so it stays.
  CHECK(f.status(a2) == OrderStatus::open);
  // A later bid meets a2 as the maker: a1 has nothing free for the first hour.
  f.place(kBuyer2, buy_duration(usd4(17500), 8, H));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].sell_order == a2);
  CHECK(trades_of(f.events())[0].price == usd4(17000));
}

TEST_CASE("a post_only ask that crosses after re-pricing is cancelled", "[green]") {
  Fixture f;
  const PoolId green = f.add_pool(kProvider, green_spec());
  OrderRequest po = sell(green, usd4(20000), 8, T0, T0 + 10 * H);
  po.post_only = true;
  const OrderId a = f.place(kProvider, po);
  const OrderId bid = f.place(kBuyer, buy_duration(usd4(18000), 8, H));
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + 365 * D), "cert"});
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(a) == OrderStatus::cancelled);
  CHECK(f.order(a).reason == Reason::would_take);
  CHECK(f.status(bid) == OrderStatus::open);
}

TEST_CASE("a policy change re-prices every affected pool", "[green]") {
  Fixture f;
  const PoolId green = f.add_pool(kProvider, green_spec());
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + 365 * D), "cert"});
  const OrderId g = f.place(kProvider, sell(green, usd4(20000), 8, T0, T0 + 10 * H));
  GreenPolicy p = GreenPolicy::defaults();
  p.rules[1].discount_bps = 1000;
  f.run(kAdmin, SetGreenPolicy{p});
  CHECK(of_type<GreenPolicyChanged>(f.events()).size() == 1);
  CHECK(of_type<PoolChanged>(f.events()).size() == 1);
  CHECK(f.order(g).effective_price == usd4(18000));
  CHECK(f.order(g).green_discount_bps == 1000);
}

// DESIGN.md §4 "Green discount": a policy change re-prices the pool's open asks at once; an ask's discount is part
// of its price (its trades record it), so a discount moved by a bp is a re-pricing the ask's OrderUpdated announces,
// even where its effective price rounds down to the same tick. (The reference matcher changed the discount in
// silence: found by the differential test's lifecycles, GPUEX_SEED=1703 GPUEX_LIFECYCLES=1.)
TEST_CASE("a discount moved without moving the effective price still re-prices the ask", "[green]") {
  Fixture f;
  const PoolId green = f.add_pool(kProvider, green_spec());
  f.run(kAdmin, VerifyPool{green, true, Seconds(T0 + 365 * D), "cert"});
  const OrderId g = f.place(kProvider, sell(green, usd4(5000), 8, T0, T0 + 10 * H));  // 0.50 -> 0.4250
  CHECK(f.order(g).effective_price == usd4(4250));
  GreenPolicy p = GreenPolicy::defaults();
  p.rules[1].discount_bps = 1499;  // 0.50 x 0.8501 = 0.425050, down to the tick: 0.4250 again
  f.run(kAdmin, SetGreenPolicy{p});
  const auto updated = of_type<OrderUpdated>(f.events());
  REQUIRE(updated.size() == 1);
  CHECK(updated[0].order.id == g);
  CHECK(updated[0].order.effective_price == usd4(4250));
  CHECK(updated[0].order.green_discount_bps == 1499);
  f.place(kBuyer, buy_duration(usd4(4250), 8, H));
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].price == usd4(4250));
  CHECK(trades_of(f.events())[0].green_discount_bps == 1499);
}
