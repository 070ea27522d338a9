// Bid constraints on pool attributes; energy constraints match verified, unexpired values only.
#include <set>

#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

// Two pools: a cheap plain one and a dearer premium one; returns {cheap ask's pool, premium pool}.
struct TwoPools {
  PoolId plain;
  PoolId premium;
};

TwoPools two_pools(Fixture& f) {
  PoolSpec plain = pool_spec(8, 1, Tier::instance, "DE");
  plain.nvlink = false;
  plain.fabric = Fabric::ethernet;
  plain.fabric_gbps = 100;
  plain.sla_pct_x1000 = 99000;
  PoolSpec premium = pool_spec(8, 1, Tier::bare_metal, "US");
  premium.energy = EnergyAttributes{1100, 9000, 5000};  // green_plus once verified
  TwoPools p{f.add_pool(kProvider, plain), f.add_pool(kProvider2, premium)};
  f.place(kProvider, sell(p.plain, usd4(15000), 8, T0, T0 + 10 * H));
  f.place(kProvider2, sell(p.premium, usd4(30000), 8, T0, T0 + 10 * H));
  return p;
}

PoolId filled_pool(Fixture& f, const BidConstraints& c) {
  OrderRequest b = buy_duration(usd4(40000), 8, H);
  b.constraints = c;
  f.place(kBuyer, b);
  const auto trades = trades_of(f.events());
  return trades.empty() ? PoolId() : trades[0].pool;
}

}  // namespace

TEST_CASE("unconstrained bids take the cheapest pool", "[constraints]") {
  Fixture f;
  const TwoPools p = two_pools(f);
  CHECK(filled_pool(f, {}) == p.plain);
}

TEST_CASE("each attribute constraint skips ineligible pools", "[constraints]") {
  Fixture f;
  const TwoPools p = two_pools(f);
  BidConstraints c;
  SECTION("regions") { c.regions = {"US", "FR"}; }
  SECTION("tiers") { c.tiers = {Tier::bare_metal}; }
  SECTION("nvlink") { c.nvlink = true; }
  SECTION("min_fabric") { c.min_fabric = Fabric::roce; }
  SECTION("min_fabric_gbps") { c.min_fabric_gbps = 200; }
  SECTION("min_sla_pct") { c.min_sla_pct_x1000 = 99500; }
  CHECK(filled_pool(f, c) == p.premium);
}

TEST_CASE("energy constraints need verified values", "[constraints][green]") {
  Fixture f;
  const TwoPools p = two_pools(f);
  BidConstraints c;
  SECTION("green_only") { c.green_only = true; }
  SECTION("max_pue") { c.max_pue_x1000 = 1200; }
  SECTION("min_renewable_pct") { c.min_renewable_pct_x100 = 8500; }
  SECTION("max_carbon") { c.max_carbon_g_per_kwh_x100 = 10000; }
  // Self-declared: nothing matches.
  CHECK(filled_pool(f, c) == PoolId());
  // Verifying re-prices the premium ask (green_plus: 3.00 -> 2.40), which now meets the resting
  // constrained bid as an incoming order, at the bid's price.
  f.run(kAdmin, VerifyPool{p.premium, true, Seconds(T0 + 365 * D), "audit 2026"});
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].pool == p.premium);
  CHECK(trades[0].buyer == kBuyer);
  CHECK(trades[0].price == usd4(40000));
  CHECK(trades[0].taker == Side::sell);
}

TEST_CASE("an expired verification no longer satisfies energy constraints", "[constraints][green]") {
  Fixture f;
  const TwoPools p = two_pools(f);
  f.run(kAdmin, VerifyPool{p.premium, true, Seconds(T0 + H), "audit"});
  f.advance(H);
  BidConstraints c;
  c.green_only = true;
  CHECK(filled_pool(f, c) == PoolId());
}

TEST_CASE("spot-tier pools sell only to interruptible bids", "[constraints][interruptible]") {
  Fixture f;
  const PoolId spot = f.add_pool(kProvider, pool_spec(8, 1, Tier::spot));
  f.place(kProvider, sell(spot, usd4(10000), 8, T0, T0 + 10 * H));
  CHECK(filled_pool(f, {}) == PoolId());
  BidConstraints c;
  c.interruptible = true;
  CHECK(filled_pool(f, c) == spot);
  CHECK(of_type<LeaseChanged>(f.events())[0].lease.interruptible);
}

TEST_CASE("interruptible bids may land on firm pools and are never interruptible there", "[constraints][interruptible]") {
  Fixture f;
  const PoolId firm = f.add_pool(kProvider);
  f.place(kProvider, sell(firm, usd4(10000), 8, T0, T0 + 10 * H));
  BidConstraints c;
  c.interruptible = true;
  CHECK(filled_pool(f, c) == firm);
  CHECK_FALSE(of_type<LeaseChanged>(f.events())[0].lease.interruptible);
}

TEST_CASE("single_pool takes all GPUs from the first pool that can cover them", "[constraints][single_pool]") {
  Fixture f;
  const PoolId a = f.add_pool(kProvider, pool_spec(8, 1));
  const PoolId b = f.add_pool(kProvider2, pool_spec(8, 2));
  f.place(kProvider, sell(a, usd4(10000), 8, T0, T0 + 10 * H));
  f.place(kProvider2, sell(b, usd4(20000), 12, T0, T0 + 10 * H));
  OrderRequest bid = buy_duration(usd4(30000), 12, H);
  bid.constraints.single_pool = true;
  bid.time_in_force = TimeInForce::ioc;
  const OrderId id = f.place(kBuyer, bid);
  const auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].pool == b);
  CHECK(trades[0].quantity == Qty(12));
  CHECK(f.status(id) == OrderStatus::filled);
}

TEST_CASE("single_pool is all-or-none and requires ioc or fok", "[constraints][single_pool]") {
  Fixture f;
  const PoolId a = f.add_pool(kProvider, pool_spec(8, 1));
  const PoolId b = f.add_pool(kProvider2, pool_spec(8, 1));
  f.place(kProvider, sell(a, usd4(10000), 8, T0, T0 + 10 * H));
  f.place(kProvider2, sell(b, usd4(10000), 8, T0, T0 + 10 * H));
  OrderRequest bid = buy_duration(usd4(30000), 12, H);
  bid.constraints.single_pool = true;
  bid.time_in_force = TimeInForce::ioc;
  const OrderId id = f.place(kBuyer, bid);
  CHECK(trades_of(f.events()).empty());
  CHECK(f.status(id) == OrderStatus::cancelled);
  bid.time_in_force = TimeInForce::gtc;
  CHECK(f.order(f.place(kBuyer, bid)).reason == Reason::invalid_field);
}

TEST_CASE("a book keeps the constraint groups of its open bids, not of every constraint set it saw", "[constraints]") {
  // The engine's memory grows with the distinct constraint sets of the bids resting, not with those ever seen:
  // thousands of sets, each placed and then cancelled or filled, leave no more groups than rest at once.
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 1));  // 400 Gb/s fabric
  const auto with = [](OrderRequest r, std::int32_t gbps) {
    r.constraints.min_fabric_gbps = gbps;
    return r;
  };
  const OrderId kept = f.place(kBuyer, with(buy_duration(usd4(10000), 1, H), 1));  // rests throughout
  for (std::int32_t i = 2; i < 3000; ++i) {
    OrderRequest r = i % 2 ? buy_duration(usd4(10000), 1, H) : buy_window(usd4(10000), 1, T0 + H, T0 + 2 * H);
    if (i % 3 == 0) r.constraints.regions = {"US", "FR"};
    const OrderId id = f.place(kBuyer2, with(r, i));
    REQUIRE(f.status(id) == OrderStatus::open);
    f.run(kBuyer2, Cancel{id});
  }
  CHECK(f.engine().constraint_groups(kH100) <= 2);
  // A slot freed and taken again serves its new set's bids: one filled (which frees its group) ...
  const OrderId again = f.place(kBuyer2, with(buy_window(usd4(20000), 1, T0 + H, T0 + 2 * H), 7));
  f.place(kProvider, sell(pool, usd4(15000), 1, T0, T0 + 10 * H));
  auto trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].buy_order == again);
  CHECK(f.status(again) == OrderStatus::filled);
  // ... and the group kept throughout still finds its bid.
  f.place(kProvider, sell(pool, usd4(9000), 1, T0, T0 + 10 * H));
  trades = trades_of(f.events());
  REQUIRE(trades.size() == 1);
  CHECK(trades[0].buy_order == kept);
  CHECK(f.engine().constraint_groups(kH100) <= 2);
}

// Found by session 21's extended random run (GPUEX_SEED=20270539 and 20270584): DESIGN.md §4 "Matching" lets
// any bid whose constraints a pool satisfies trade with its asks, however earlier bids came and went. A bid
// that names only regions shares the unconstrained bids' group (regions apart); when it left, its group was
// listed for reuse, an unconstrained bid then made it the unconstrained group, and after that one left too a
// bid with other constraints took the slot: later unconstrained bids were judged by nvlink and met no ask.
TEST_CASE("an unconstrained bid meets the asks of every pool after other bids came and went", "[constraints]") {
  Fixture f;
  PoolSpec plain = pool_spec(8, 1, Tier::instance, "DE");
  plain.nvlink = false;
  const PoolId pool = f.add_pool(kProvider, plain);
  OrderRequest regional = buy_duration(usd4(15000), 4, H);
  regional.constraints.regions = {"US"};
  f.run(kBuyer, Cancel{f.place(kBuyer, regional)});                           // rested (no ask), then left
  f.run(kBuyer, Cancel{f.place(kBuyer, buy_duration(usd4(15000), 4, H))});  // likewise, unconstrained
  OrderRequest nvlink = buy_duration(usd4(15000), 4, H);
  nvlink.constraints.nvlink = true;
  f.place(kBuyer2, nvlink);  // rests: the pool has no NVLink
  f.place(kProvider, sell(pool, usd4(12000), 8, T0, T0 + 10 * H));
  CHECK(trades_of(f.events()).empty());
  f.place(kBuyer, buy_duration(usd4(15000), 4, H));  // "They trade while bid price >= ask effective price"
  REQUIRE(trades_of(f.events()).size() == 1);
  CHECK(trades_of(f.events())[0].quantity == Qty(4));
  CHECK(trades_of(f.events())[0].price == usd4(12000));
}

// A pool's list of the groups it may satisfy is brought up to date from the book's latest groups made when it is
// at most 16 behind, and rebuilt otherwise (Impl::groups_of). Either way an ask's walk must meet the bids of every
// group made since the pool's last walk, and none of a group its pool fails that took the slot of one it fitted.
TEST_CASE("an ask meets the bids of every constraint group made since its pool's last walk", "[constraints]") {
  const int n = GENERATE(15, 16, 40);  // groups made since the last walk: n + 1 (16: replayed; 17, 41: rebuilt)
  Fixture f;
  const PoolId pool = f.add_pool(kProvider, pool_spec(8, 8));  // 64 GPUs, 400 Gb/s fabric
  const auto with = [](OrderRequest r, std::int32_t gbps) {
    r.constraints.min_fabric_gbps = gbps;
    return r;
  };
  // The pool's walk: its list now holds the group of min_fabric_gbps 1, freed when the bid fills.
  f.place(kBuyer, with(buy_duration(usd4(10000), 1, H), 1));
  f.place(kProvider, sell(pool, usd4(9000), 1, T0, T0 + 10 * H));
  REQUIRE(trades_of(f.events()).size() == 1);
  // A set the pool fails takes that slot, at the best price; then n sets it fits, each a group of its own.
  const OrderId unfit = f.place(kBuyer2, with(buy_duration(usd4(20000), 1, H), 1000));
  std::set<OrderId> fit;
  for (int i = 0; i < n; ++i) fit.insert(f.place(kBuyer, with(buy_duration(usd4(10000), 1, H), 2 + i)));
  f.place(kProvider, sell(pool, usd4(9000), n, T0, T0 + 10 * H));
  std::set<OrderId> bought;
  for (const Trade& t : trades_of(f.events())) bought.insert(t.buy_order);
  CHECK(bought == fit);
  CHECK(f.status(unfit) == OrderStatus::open);
}
