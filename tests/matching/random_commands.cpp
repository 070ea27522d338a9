// Random command sequences over three markets, four trading accounts and a handful of pools, tuned so that
// trades, partial fills, preemptions, self-trades, expiries, re-pricings and rejects all really happen.
#include "random_commands.hpp"

#include <algorithm>

namespace gpuex::matching::test {

namespace {

constexpr std::int64_t kMinute = 60;
constexpr std::int64_t kHour = 3600;
constexpr std::int64_t kDay = 86400;
// Per command while none runs, the chance (in thousandths) that a spot-lease lifecycle scenario starts.
constexpr std::int64_t kScenarioStartPerMille = 35;

const AccountId kP1{1};   // provider that also buys (self-trades)
const AccountId kP2{2};   // provider
const AccountId kB1{10};  // buyer
const AccountId kB2{11};  // buyer that also sells on its own pool now and then
const AccountId kAdminAccount{99};

const std::vector<MarketId>& markets() {
  static const std::vector<MarketId> m{MarketId{"A100"}, MarketId{"H100"}, MarketId{"L40S"}};
  return m;
}

}  // namespace

RandomCommands::RandomCommands(std::uint64_t seed, std::int64_t start_time)
    : state_(seed), now_(start_time) {
  state_ = u64() ^ 0x2545F4914F6CDD1DULL;  // scramble, so that neighbouring seeds give unrelated sequences
}

EngineConfig RandomCommands::config() {
  EngineConfig c;
  c.markets = {MarketSpec{MarketId{"A100"}, Price(100), 316}, MarketSpec{MarketId{"H100"}, Price(100), 1000},
               MarketSpec{MarketId{"L40S"}, Price(1000), 362}};
  return c;
}

// splitmix64: portable, so a seed replays the same sequence with any standard library.
std::uint64_t RandomCommands::u64() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::int64_t RandomCommands::range(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<std::int64_t>(u64() % static_cast<std::uint64_t>(hi - lo + 1));
}

bool RandomCommands::chance(int percent) { return range(0, 99) < percent; }

MarketId RandomCommands::random_market() {
  const std::int64_t r = range(0, 99);
  return r < 85 ? markets()[1] : r < 95 ? markets()[0] : markets()[2];
}

// Prices in ten-thousandths of a USD in [lo4, hi4], on a coarse grid so that levels collide; rarely off-tick.
Price RandomCommands::random_price(std::int64_t lo4, std::int64_t hi4, const MarketId& m) {
  std::int64_t micros = range(lo4 / 500, hi4 / 500) * 500 * 100;
  if (m.value() == "L40S") micros = micros / 1000 * 1000;
  if (chance(2)) micros += 37;  // off_tick
  return Price(micros);
}

PoolSpec RandomCommands::random_pool_spec() {
  PoolSpec s;
  s.market = random_market();
  static const std::vector<std::string> regions{"US", "DE", "FR"};
  s.region = pick(regions);
  const std::int64_t t = range(0, 99);
  s.tier = t < 35 ? Tier::bare_metal : t < 55 ? Tier::instance : Tier::spot;
  static const std::vector<std::int32_t> gpn{1, 2, 4, 8};
  s.gpus_per_node = pick(gpn);
  s.nodes = static_cast<std::int32_t>(range(1, 4));
  s.nvlink = chance(60);
  s.fabric = static_cast<Fabric>(range(0, 2));
  static const std::vector<std::int32_t> gbps{100, 200, 400};
  s.fabric_gbps = pick(gbps);
  static const std::vector<std::int32_t> sla{99000, 99500, 99900};
  s.sla_pct_x1000 = pick(sla);
  const std::int64_t e = range(0, 2);
  s.energy = e == 0 ? EnergyAttributes{1100, 9000, 5000} : e == 1 ? EnergyAttributes{1250, 6000, 30000}
                                                                   : EnergyAttributes{1400, 2000, 45000};
  s.egress_per_gb = range(0, 100) * 100;
  return s;
}

// Time in force, post_only, STP and client_order_id, shared by both sides.
void RandomCommands::add_options(OrderRequest& r, bool sell) {
  const std::int64_t t = range(0, 99);
  r.time_in_force = t < 60 ? TimeInForce::gtc : t < 78 ? TimeInForce::gtd : t < 90 ? TimeInForce::ioc : TimeInForce::fok;
  if (sell && r.time_in_force == TimeInForce::fok && chance(70)) r.time_in_force = TimeInForce::gtc;
  if (r.time_in_force == TimeInForce::gtd) r.expire_at = Seconds(chance(5) ? now_ : now_ + range(1, 3 * kDay));
  // post_only with ioc/fok is a combination the server decides on (DESIGN.md "Rejections"); not generated.
  r.post_only = (r.time_in_force == TimeInForce::gtc || r.time_in_force == TimeInForce::gtd) && chance(10);
  const std::int64_t s = range(0, 99);
  r.stp = s < 50 ? StpMode::cancel_newest : s < 75 ? StpMode::cancel_oldest : StpMode::cancel_both;
  if (chance(35)) r.client_order_id = "c" + std::to_string(next_cid_++);
}

CommandBody RandomCommands::place_sell(AccountId& account) {
  std::vector<PoolInfo> live;
  for (const PoolInfo& p : pools_)
    if (!p.retired) live.push_back(p);
  if (live.empty()) {
    account = kP1;
    return AddPool{random_pool_spec()};
  }
  const PoolInfo p = pick(live);
  account = p.provider;  // another account's pool is refused by the server (404) before the engine
  OrderRequest r;
  r.side = Side::sell;
  r.pool = p.id;
  r.price = random_price(15000, 22000, p.market);
  if (p.tier == Tier::spot && chance(60)) {
    // Spot capacity offered for days: what interruptible bids fill and later preempt.
    r.start = Seconds(now_ - range(0, kHour));
    r.end = Seconds(now_ + range(2, 6) * kDay);
    r.quantity = Qty(std::max<std::int64_t>(1, std::int64_t{p.gpus_per_node} * p.nodes));  // a pool of 0 nodes: 1
    r.min_chunk = Qty(1);
    r.time_in_force = TimeInForce::gtc;
    if (chance(30)) r.client_order_id = "c" + std::to_string(next_cid_++);
    return PlaceOrder{r};
  }
  static const std::vector<std::int64_t> chunks{1, 1, 1, 2, 4};
  std::int64_t chunk = chance(15) ? p.gpus_per_node : pick(chunks);
  const std::int64_t gpus = std::int64_t{p.gpus_per_node} * p.nodes;
  chunk = std::max<std::int64_t>(1, std::min(chunk, gpus));  // a pool shrunk to no nodes still gets asks
  r.min_chunk = Qty(chunk);
  r.quantity = Qty(chunk * range(1, std::max<std::int64_t>(1, gpus / chunk)));
  if (chance(4)) r.quantity = Qty(r.quantity.value + 1);  // quantity_not_multiple_of_chunk (or fits anyway)
  const std::int64_t w = range(0, 99);
  std::int64_t start = w < 40 ? now_ - range(0, 2 * kHour) : w < 70 ? now_ : now_ + range(5 * kMinute, 40 * kDay);
  std::int64_t len = chance(35) ? range(2, 12) * kHour : range(1, 6) * kDay;
  if (chance(3)) {
    start = now_ - 2 * kDay;
    len = kDay;  // already ended: rejected
  }
  r.start = Seconds(start);
  r.end = Seconds(start + len);
  static const std::vector<std::int64_t> min_durations{0, 0, 0, 30 * kMinute, kHour, 4 * kHour};
  r.min_duration = Seconds(pick(min_durations));
  add_options(r, true);
  return PlaceOrder{r};
}

// Interruptible spot bids on a market with a spot-tier pool: cheap long ones that fill and hold leases, then
// dearer short ones that find no free capacity and preempt them.
CommandBody RandomCommands::place_spot_bid(AccountId& account) {
  std::vector<PoolInfo> spot;
  for (const PoolInfo& p : pools_)
    if (!p.retired && p.tier == Tier::spot) spot.push_back(p);
  if (spot.empty()) return place_buy(account);
  const PoolInfo& p = pick(spot);
  account = chance(50) ? kB1 : kB2;
  OrderRequest r;
  r.side = Side::buy;
  r.market = p.market;
  r.constraints.interruptible = true;
  const bool cheap = chance(50);
  r.price = random_price(cheap ? 17000 : 23000, cheap ? 21000 : 26000, p.market);
  r.quantity = Qty(range(1, std::int64_t{p.gpus_per_node} * p.nodes));
  r.duration = Seconds(cheap ? range(6, 24) * kHour : range(1, 4) * 30 * kMinute);
  if (!cheap && chance(30)) {
    r.duration.reset();
    r.start = Seconds(now_ + range(3, 30) * kMinute);
    r.end = Seconds(r.start->value + kHour);
  }
  r.time_in_force = chance(50) ? TimeInForce::ioc : TimeInForce::gtc;
  if (chance(15)) r.time_in_force = TimeInForce::fok;
  if (chance(20)) r.min_chunk = Qty(2), r.quantity = Qty(2 * range(1, 4));
  if (chance(30)) r.client_order_id = "c" + std::to_string(next_cid_++);
  return PlaceOrder{r};
}

CommandBody RandomCommands::place_buy(AccountId& account) {
  const std::int64_t a = range(0, 99);
  account = a < 40 ? kB1 : a < 80 ? kB2 : a < 95 ? kP1 : kP2;
  OrderRequest r;
  r.side = Side::buy;
  r.market = random_market();
  r.price = random_price(15000, 26000, r.market);
  static const std::vector<std::int64_t> chunks{1, 1, 1, 2, 4};
  const std::int64_t chunk = pick(chunks);
  r.min_chunk = Qty(chunk);
  r.quantity = Qty(chunk * range(1, chunk == 1 ? 12 : 4));
  if (chance(3)) r.quantity = Qty(r.quantity.value + 1);
  std::vector<OrderInfo> asks;
  for (const OrderInfo& o : orders_)
    if (o.open && o.side == Side::sell && o.window_end > now_ + kHour) asks.push_back(o);
  if (!asks.empty() && chance(35)) {
    // A window inside an open ask's, priced around it, so that forward bids really meet asks.
    const OrderInfo& ask = pick(asks);
    r.market = ask.market;
    r.price = Price(std::max<std::int64_t>(100, ask.price.value / 500 / 100 * 500 * 100 + range(-2, 4) * 500 * 100));
    if (r.market.value() == "L40S") r.price = Price(r.price.value / 1000 * 1000);
    const std::int64_t from = std::max(ask.window_start, now_);
    const std::int64_t start = from + range(0, std::max<std::int64_t>(0, (ask.window_end - from) / 2));
    const std::int64_t end = std::min(ask.window_end, start + range(1, 8) * kHour);
    if (end > start) {
      r.start = Seconds(start);
      r.end = Seconds(end);
    } else {
      r.duration = Seconds(kHour);
    }
  } else if (chance(60)) {
    static const std::vector<std::int64_t> durations{30 * kMinute, kHour, 2 * kHour, 6 * kHour, kDay};
    r.duration = Seconds(pick(durations));
  } else {
    static const std::vector<std::int64_t> offsets{0, 5 * kMinute, 10 * kMinute, 30 * kMinute, 2 * kHour, kDay,
                                                   10 * kDay, 35 * kDay};
    std::int64_t start = now_ + pick(offsets);
    if (chance(3)) start = now_ - kMinute;  // window_in_past
    static const std::vector<std::int64_t> lens{kHour, 4 * kHour, kDay};
    r.start = Seconds(start);
    r.end = Seconds(start + pick(lens));
  }
  BidConstraints& c = r.constraints;
  c.interruptible = chance(50);
  if (chance(10)) c.tiers = chance(50) ? std::vector<Tier>{Tier::bare_metal} : std::vector<Tier>{Tier::instance, Tier::spot};
  if (chance(10)) c.regions = chance(50) ? std::vector<std::string>{"US"} : std::vector<std::string>{"DE", "FR"};
  c.nvlink = chance(8);
  if (chance(8)) c.min_fabric = static_cast<Fabric>(range(1, 2));
  if (chance(6)) c.min_fabric_gbps = 200;
  if (chance(6)) c.min_sla_pct_x1000 = 99500;
  c.green_only = chance(8);
  if (chance(5)) c.max_pue_x1000 = 1200;
  if (chance(5)) c.min_renewable_pct_x100 = 5500;
  if (chance(5)) c.max_carbon_g_per_kwh_x100 = 20000;
  add_options(r, false);
  if (chance(8)) {
    c.single_pool = true;
    r.time_in_force = chance(50) ? TimeInForce::ioc : TimeInForce::fok;
    r.expire_at.reset();
    r.post_only = false;
  }
  return PlaceOrder{r};
}

// An order the engine must refuse before it looks at the market (DESIGN.md §4 "Rejections": malformed fields
// and combinations, an unknown market or pool, someone else's or a retired pool): invalid_field or not_found.
CommandBody RandomCommands::place_invalid(AccountId& account) {
  if (!malformed_) return place_buy(account);
  const std::int64_t kind = range(0, 14);
  const bool sell_kind = kind == 4 || kind == 5 || kind == 9 || kind == 10 || kind == 11 || kind == 14;
  CommandBody body = sell_kind ? place_sell(account) : place_buy(account);
  auto* place = std::get_if<PlaceOrder>(&body);
  if (!place) return body;  // no pool yet: the AddPool place_sell chose
  OrderRequest& r = place->order;
  switch (kind) {
    case 0: r.quantity = Qty(chance(50) ? 0 : -r.min_chunk.value); break;
    case 1: r.price = Price(chance(50) ? 0 : -100); break;
    case 2: r.time_in_force = TimeInForce::gtd, r.expire_at.reset(), r.constraints.single_pool = false; break;
    case 3:  // single_pool needs ioc or fok
      r.constraints.single_pool = true;
      r.time_in_force = chance(50) ? TimeInForce::gtc : TimeInForce::gtd;
      if (r.time_in_force == TimeInForce::gtd) r.expire_at = Seconds(now_ + kHour);
      break;
    case 4:  // a sell without a window, or with an empty one
      if (chance(50)) r.start.reset(), r.end.reset();
      else r.end = r.start;
      break;
    case 5: r.duration = Seconds(kHour); break;  // a sell with a duration
    case 6:  // a buy with both a window and a duration, or with neither
      if (chance(50)) {
        r.start = Seconds(now_ + kHour), r.end = Seconds(now_ + 2 * kHour), r.duration = Seconds(kHour);
      } else {
        r.start.reset(), r.end.reset(), r.duration.reset();
      }
      break;
    case 7: r.min_chunk = Qty(chance(50) ? 0 : -2); break;
    case 8:  // post_only is for gtc and gtd only
      r.post_only = true, r.time_in_force = chance(50) ? TimeInForce::ioc : TimeInForce::fok;
      r.expire_at.reset(), r.constraints.single_pool = false;
      break;
    case 9: r.pool = PoolId(987654); break;  // unknown pool
    case 10: {                                // someone else's pool
      static const std::vector<AccountId> accounts{kP1, kP2, kB1, kB2};
      AccountId other = pick(accounts);
      if (other == account) other = account == kP1 ? kP2 : kP1;
      account = other;
      break;
    }
    case 11: {  // a retired pool (its provider's), else an unknown one
      const PoolId live = r.pool;
      for (const PoolInfo& p : pools_)
        if (p.retired && chance(50)) r.pool = p.id, account = p.provider;
      if (r.pool == live) r.pool = PoolId(987655);
      break;
    }
    case 12: r.market = MarketId{"B200"}; break;  // unknown market
    case 13:                                      // a duration that is not positive
      r.start.reset(), r.end.reset(), r.duration = Seconds(chance(50) ? 0 : -kHour);
      break;
    default: r.min_duration = Seconds(-kMinute); break;  // 14: a negative min_duration
  }
  return body;
}

// A repeat of an earlier client_order_id: the same body (a duplicate) or a changed one (a conflict).
CommandBody RandomCommands::repeat_client_order(AccountId& account) {
  if (placed_with_cid_.empty()) return place_buy(account);
  Placed p = pick(placed_with_cid_);
  account = p.account;
  if (chance(40)) p.request.price = Price(p.request.price.value + 500 * 100);
  return PlaceOrder{p.request};
}

// The scenario's bids: interruptible, on its market, and mostly held to its pool by attributes the plain random
// bids never ask for (400 Gb/s and a 99.9 % SLA in FR), so that free capacity elsewhere does not take them
// before they preempt; now and then unconstrained, to meet the rest of the market too.
OrderRequest RandomCommands::scenario_bid(Qty quantity, Price price, Qty chunk) {
  OrderRequest r;
  r.side = Side::buy;
  r.market = scenario_.market;
  r.price = price;
  r.quantity = quantity;
  r.min_chunk = chunk;
  // Now and then a lot of its own: one GPU against an ask's pairs, or pairs against an ask's single GPUs (the fill
  // is a multiple of both).
  if (chance(15)) r.min_chunk = chunk.value == 1 && quantity.value % 2 == 0 ? Qty(2) : Qty(1);
  BidConstraints& c = r.constraints;
  c.interruptible = true;
  if (chance(80)) {
    c.tiers = {Tier::spot};
    c.regions = {"FR"};
    c.min_fabric_gbps = 400;
    c.min_sla_pct_x1000 = 99900;
  }
  const std::int64_t t = range(0, 9);
  r.time_in_force = t < 7 ? TimeInForce::ioc : t < 9 ? TimeInForce::gtc : TimeInForce::fok;
  if (chance(20)) r.client_order_id = "c" + std::to_string(next_cid_++);
  return r;
}

// The leases on the scenario's pool that a preemption may still take (running or reserved, not in their notice),
// in the order preemption takes them: by price, then id.
std::vector<const RandomCommands::LeaseInfo*> RandomCommands::preemptible_scenario_leases() const {
  std::vector<const LeaseInfo*> out;
  for (const LeaseInfo& l : leases_)
    if (l.pool == scenario_.pool && !l.ended && (l.status == LeaseStatus::active || l.status == LeaseStatus::reserved))
      out.push_back(&l);
  std::sort(out.begin(), out.end(), [](const LeaseInfo* a, const LeaseInfo* b) {
    return a->price != b->price ? a->price < b->price : a->id < b->id;
  });
  return out;
}

// The cheapest of them not bought by `not_of`; only split-off ones if `split_only`.
const RandomCommands::LeaseInfo* RandomCommands::cheapest_scenario_lease(AccountId not_of, bool split_only) const {
  for (const LeaseInfo* l : preemptible_scenario_leases())
    if (l->buyer != not_of && (!split_only || l->split_from.value != 0)) return l;
  return nullptr;
}

RandomCommands::ScenarioAsk* RandomCommands::scenario_ask(OrderId id) {
  for (ScenarioAsk& a : scenario_.asks)
    if (a.id == id) return &a;
  return nullptr;
}

std::vector<RandomCommands::ScenarioAsk*> RandomCommands::open_scenario_asks() {
  std::vector<ScenarioAsk*> out;
  for (ScenarioAsk& a : scenario_.asks)
    if (a.open) out.push_back(&a);
  return out;
}

// The list price of the ask that sold lease `l` as the lifecycle last saw it (the lease's own if not its ask).
Price RandomCommands::ask_price_of(const LeaseInfo& l) {
  const ScenarioAsk* a = scenario_ask(l.sell_order);
  return a ? a->price : l.price;
}

// Someone who bids for lease `l`'s GPUs: mostly neither its buyer nor its provider (who may not preempt it: their
// bids skip it for the next lease, and the provider's meet its own open asks under self-trade prevention).
AccountId RandomCommands::bidder_for(const LeaseInfo& l) {
  static const std::vector<AccountId> traders{kP1, kP2, kB1, kB2};
  const std::int64_t k = range(0, 99);
  if (k < 5) return l.buyer;
  if (k < 9) return scenario_.provider;
  AccountId b = pick(traders);
  while (b == l.buyer || b == scenario_.provider) b = pick(traders);
  return b;
}

// The scenario's next command, or none when it cannot go on (its pool or asks refused or gone): the caller then
// draws a plain random one.
std::optional<CommandBody> RandomCommands::scenario_body(AccountId& account) {
  Scenario& s = scenario_;
  const PoolInfo* pool = nullptr;
  for (const PoolInfo& p : pools_)
    if (p.id == s.pool && !p.retired) pool = &p;
  const std::vector<ScenarioAsk*> open = open_scenario_asks();
  constexpr std::int64_t kStep = 50000;  // 0.05 USD, on every market's tick
  auto lots = [](Qty q, Qty chunk) { return std::max<std::int64_t>(1, q.value / std::max<std::int64_t>(1, chunk.value)); };
  // A bid's window over ask `a` from now on (a fixed one: a bid for its start, when it starts later).
  auto window_over = [&](OrderRequest& r, const ScenarioAsk& a) {
    r.start = Seconds(std::max(now_, a.start));
    r.end = Seconds(a.end);
  };
  // Once its leases live, now and then the rest of the market strikes the lifecycle (twist()); a halt is short.
  const bool leased = s.stage >= Stage::first_lease && s.stage <= Stage::after;
  if (s.halted && chance(60)) {
    s.halted = false;
    account = kAdminAccount;
    return HaltMarket{s.market, false};
  }
  if (pool && leased && s.twists && chance(30)) {
    if (std::optional<CommandBody> body = twist(account)) return body;
  }
  switch (s.stage) {
    case Stage::idle:
      return std::nullopt;
    case Stage::pool: {
      PoolSpec spec = random_pool_spec();
      spec.tier = Tier::spot;
      spec.region = "FR";
      spec.fabric_gbps = 400;
      spec.sla_pct_x1000 = 99900;
      spec.gpus_per_node = chance(50) ? 2 : 4;
      spec.nodes = static_cast<std::int32_t>(spec.gpus_per_node == 2 ? range(2, 4) : range(1, 2));
      if (chance(20)) spec.market = markets()[2];  // L40S: its coarse tick rounds effective prices more
      account = chance(50) ? kP1 : kP2;
      s = Scenario{};
      s.stage = Stage::ask;
      s.provider = account;
      s.market = spec.market;
      s.awaiting_pool = true;
      s.asks_left = chance(45) ? static_cast<int>(range(2, 3)) : 1;  // asks sharing the pool
      s.twists = chance(70);
      return AddPool{spec};
    }
    case Stage::ask: {
      if (!pool) break;
      // The pool's GPUs shared among the asks (the last takes what is left), each at its own price (now and then
      // the previous one's, a tie that time priority breaks); a later one now and then starts hours ahead.
      std::int64_t offered = 0;
      for (const ScenarioAsk& a : s.asks) offered += a.quantity.value;
      const std::int64_t rest = std::int64_t{pool->gpus_per_node} * pool->nodes - offered;
      if (rest <= 0) {
        s.stage = Stage::first_lease;
        return scenario_body(account);
      }
      // The first takes half or more, so that its first lease is long enough to split.
      const std::int64_t share = s.asks_left <= 1 ? rest
                                 : s.asks.empty() ? range((rest + 1) / 2, std::max<std::int64_t>(1, rest - s.asks_left + 1))
                                                  : std::max<std::int64_t>(1, rest / s.asks_left);
      OrderRequest r;
      r.side = Side::sell;
      r.pool = s.pool;
      r.price = !s.asks.empty() && chance(25) ? s.asks.back().price : Price(range(30, 40) * kStep);  // 1.50 .. 2.00
      r.min_chunk = Qty(share % 2 == 0 && chance(20) ? 2 : 1);
      r.quantity = Qty(share);
      r.start = Seconds(!s.asks.empty() && chance(25) ? now_ + range(1, 12) * kHour : now_ - range(0, 10 * kMinute));
      r.end = Seconds(now_ + range(24, 72) * kHour);
      r.time_in_force = TimeInForce::gtc;
      // Now and then a minimum duration (which preemptions of its leases must respect too), or an expiry that
      // ends it while its leases live (they can no longer be preempted then).
      if (chance(25)) r.min_duration = Seconds(range(1, 4) * 30 * kMinute);
      if (chance(15)) r.time_in_force = TimeInForce::gtd, r.expire_at = Seconds(now_ + range(2, 20) * kHour);
      account = pool->provider;
      s.pending = ScenarioAsk{OrderId(), r.price, r.quantity, r.min_chunk, r.start->value, r.end->value, true};
      s.awaiting_ask = true;
      if (--s.asks_left <= 0) s.stage = Stage::first_lease;
      return PlaceOrder{r};
    }
    case Stage::first_lease: {
      if (!pool || open.empty()) break;
      // The long lease a preemption later splits: at least two lots when the ask has three or more.
      const ScenarioAsk& a = *open.front();
      const std::int64_t n = lots(a.quantity, a.chunk);
      const std::int64_t q = n >= 3 ? range(2, std::max<std::int64_t>(2, n / 2)) : 1;
      OrderRequest r = scenario_bid(Qty(q * a.chunk.value), Price(a.price.value + range(0, 2) * kStep), a.chunk);
      window_over(r, a);
      account = chance(50) ? kB1 : kB2;
      s.stage = Stage::amend;
      s.left = static_cast<int>(range(1, 2));
      return PlaceOrder{r};
    }
    case Stage::amend: {
      if (!pool || open.empty()) {
        s.stage = Stage::preempt;
        return scenario_body(account);
      }
      // Mostly dearer: the leases it sold keep their own price, and preemption takes the ask's last one.
      static const std::vector<std::int64_t> steps{-1, 1, 1, 2, 3, 4};
      const ScenarioAsk& o = open.front()->id == s.asks.front().id && chance(70) ? *open.front() : *pick(open);
      Amend a;
      a.order = o.id;
      const std::int64_t k = range(0, 9);
      if (k < 9) a.price = Price(std::max<std::int64_t>(kStep, o.price.value + pick(steps) * kStep));
      if (k >= 6 && o.quantity.value > o.chunk.value) a.quantity = Qty(o.quantity.value - o.chunk.value);  // a lot less
      account = s.provider;
      if (--s.left <= 0) {
        s.stage = Stage::fill;
        s.left = static_cast<int>(range(1, 3));
      }
      return a;
    }
    case Stage::fill:
    case Stage::sweep: {
      if (!pool || open.empty()) {
        s.stage = Stage::preempt;
        return scenario_body(account);
      }
      // Several bids for the rest of an ask's window, then one for all of each ask (ioc): the asks end filled.
      const bool sweep = s.stage == Stage::sweep;
      const ScenarioAsk& a = sweep ? *open.front() : *pick(open);
      const std::int64_t n = lots(a.quantity, a.chunk);
      const std::int64_t q = sweep ? n : range(1, std::max<std::int64_t>(1, n / 3));
      const Price price(a.price.value + range(sweep ? 1 : 0, 2) * kStep);
      OrderRequest r = scenario_bid(Qty(q * a.chunk.value), price, a.chunk);
      window_over(r, a);
      if (!sweep && chance(15)) {
        // Part of the window: hours from now (the ask's free capacity steps up again after it), or later on.
        if (chance(50) && a.start <= now_) r.start.reset(), r.end.reset(), r.duration = Seconds(range(1, 8) * kHour);
        else r.start = Seconds(r.start->value + range(1, 6) * kHour);
      }
      if (sweep) r.time_in_force = TimeInForce::ioc;
      account = chance(50) ? kB1 : kB2;
      if (!sweep && --s.left <= 0) {
        s.stage = Stage::sweep;
        s.left = static_cast<int>(s.asks.size());
      } else if (sweep && --s.left <= 0) {
        s.stage = Stage::preempt;
      }
      return PlaceOrder{r};
    }
    case Stage::preempt:
    case Stage::preempt_split: {
      // Dear short bids that find no free capacity: the first takes part of the cheapest lease (which splits),
      // the next ones the rest split off from it, in part or whole; now and then one takes several leases at
      // once (of asks at different prices), the last of them in part.
      const bool split = s.stage == Stage::preempt_split;
      const LeaseInfo* l = cheapest_scenario_lease(AccountId(), split);
      if (!l && split) l = cheapest_scenario_lease(AccountId(), false);
      if (!l) {
        s.stage = Stage::after;
        s.left = static_cast<int>(range(2, 5));
        return scenario_body(account);
      }
      const Qty chunk = scenario_ask(l->sell_order) ? scenario_ask(l->sell_order)->chunk : Qty(1);
      const std::int64_t n = lots(l->quantity, chunk);
      std::int64_t q = split ? range(1, n) : n >= 2 ? range(1, n - 1) : 1;
      std::int64_t dearest = std::max(ask_price_of(*l).value, l->price.value);
      const bool several = split && chance(25);
      if (several) {
        const std::vector<const LeaseInfo*> all = preemptible_scenario_leases();
        const std::size_t m = std::min<std::size_t>(all.size(), static_cast<std::size_t>(range(2, 3)));
        q = 0;
        for (std::size_t i = 0; i < m; ++i) {
          q += lots(all[i]->quantity, chunk);
          dearest = std::max({dearest, ask_price_of(*all[i]).value, all[i]->price.value});
        }
        if (m > 0) q -= range(0, lots(all[m - 1]->quantity, chunk) - 1);
        q = std::max<std::int64_t>(1, q + (chance(15) ? 1 : 0));  // now and then a lot more than they hold
      }
      OrderRequest r = scenario_bid(Qty(q * chunk.value), Price(dearest + range(1, 5) * kStep), chunk);
      if (several && chance(30)) r.time_in_force = TimeInForce::fok;
      if (chance(25)) {
        // A fixed window after the notice: minutes ahead (spot), or hours ahead (a forward trade over the lease).
        r.start = Seconds(now_ + (chance(60) ? range(3, 30) * kMinute : range(1, 12) * kHour));
        r.end = Seconds(r.start->value + range(1, 3) * kHour);
      } else {
        r.duration = Seconds(range(1, 4) * 30 * kMinute);
      }
      account = bidder_for(*l);
      if (account == s.provider) r.stp = static_cast<StpMode>(range(0, 2));
      if (!split) {
        s.stage = Stage::preempt_split;
        s.left = static_cast<int>(range(2, 4));
      } else if (--s.left <= 0) {
        s.stage = Stage::after;
        s.left = static_cast<int>(range(2, 5));
      }
      return PlaceOrder{r};
    }
    case Stage::after: {
      // Through the leases' lives (next() lets time run on): releases by their buyers, ticks, and now and then
      // the provider offers released GPUs again (a new ask on the pool, met by resting bids in priority order).
      if (--s.left <= 0) {
        s.stage = chance(40) ? Stage::retire : Stage::idle;
        s.left = static_cast<int>(range(4, 8));
      }
      std::vector<LeaseInfo> mine;
      for (const LeaseInfo& l : leases_)
        if (l.pool == s.pool && !l.ended) mine.push_back(l);
      const std::int64_t k = range(0, 99);
      if (!mine.empty() && k < 35) {
        const LeaseInfo& l = pick(mine);
        account = l.buyer;
        return ReleaseLease{l.id};
      }
      if (pool && k < 60) {
        OrderRequest r;
        r.side = Side::sell;
        r.pool = s.pool;
        r.price = Price(range(28, 42) * kStep);
        r.quantity = Qty(range(1, 2));
        r.start = Seconds(now_);
        r.end = Seconds(now_ + range(2, 24) * kHour);
        r.time_in_force = TimeInForce::gtc;
        r.post_only = chance(15);
        account = s.provider;
        s.pending = ScenarioAsk{OrderId(), r.price, r.quantity, r.min_chunk, r.start->value, r.end->value, true};
        s.awaiting_ask = true;
        return PlaceOrder{r};
      }
      return Tick{};
    }
    case Stage::retire: {
      // The provider withdraws what it still offers and retires the pool once its leases have ended (a retirement
      // tried while something lives on it is refused: pool_busy).
      if (!pool) break;
      if (--s.left <= 0) s.stage = Stage::idle;
      if (!open.empty()) {
        account = s.provider;
        return Cancel{open.front()->id};
      }
      bool live = false;
      for (const LeaseInfo& l : leases_) live = live || (l.pool == s.pool && !l.ended);
      if (live && s.stage != Stage::idle && chance(70)) return Tick{};
      account = s.provider;
      s.stage = Stage::idle;
      return RetirePool{s.pool};
    }
  }
  s.stage = Stage::idle;  // its pool or asks were refused or have gone
  return std::nullopt;
}

// What the rest of the market does to a lifecycle while its leases live, or none when the drawn kind has nothing
// to act on: each kind is a rule of DESIGN.md §4 that meets preemptible capacity only here.
std::optional<CommandBody> RandomCommands::twist(AccountId& account) {
  Scenario& s = scenario_;
  constexpr std::int64_t kStep = 50000;
  const PoolInfo* pool = nullptr;
  for (const PoolInfo& p : pools_)
    if (p.id == s.pool && !p.retired) pool = &p;
  if (!pool) return std::nullopt;
  const std::vector<const LeaseInfo*> leases = preemptible_scenario_leases();
  const std::vector<ScenarioAsk*> open = open_scenario_asks();
  // The dearest price a preemption of the cheapest lease would take, a step or a few above.
  auto over_leases = [&]() {
    std::int64_t p = open.empty() ? 35 * kStep : open.front()->price.value;
    if (!leases.empty()) p = std::max(ask_price_of(*leases.front()).value, leases.front()->price.value);
    return Price(p + range(1, 4) * kStep);
  };
  // Bid `o` amended: in `cut_pct` of cases (when it has a lot to spare) a lot less, which keeps its priority;
  // else dearer, which loses it and matches it again, in `over_pct` of those over the leases (it may preempt).
  auto amend_bid = [&](const OrderInfo& o, int cut_pct, int over_pct) {
    Amend a;
    a.order = o.id;
    if (chance(cut_pct) && o.quantity.value >= 2 * o.min_chunk.value) a.quantity = Qty(o.quantity.value - o.min_chunk.value);
    else a.price = chance(over_pct) ? over_leases() : Price(o.limit.value + range(1, 3) * kStep);
    account = o.account;
    return a;
  };
  // A bid it placed to rest, amended: a lot less (it keeps its priority) or dearer (it loses it, and is matched
  // again: it may take free capacity or preempt leases now).
  std::vector<const OrderInfo*> resting;
  for (const OrderInfo& o : orders_)
    if (o.open && std::find(s.resting.begin(), s.resting.end(), o.id) != s.resting.end()) resting.push_back(&o);
  if (!resting.empty() && chance(40)) {
    return amend_bid(*pick(resting), 30, 70);
  }
  const std::int64_t k = range(0, 99);
  if (k < 12) {
    // A verification (or a short one that expires among the next commands, or its withdrawal): the open asks
    // and the preemptions re-priced by the green discount.
    account = kAdminAccount;
    const std::int64_t v = range(0, 9);
    if (v < 7) return VerifyPool{s.pool, true, Seconds(now_ + range(1, 5) * kDay), "audit"};
    if (v < 8) return VerifyPool{s.pool, true, Seconds(now_ + range(1, 30) * kMinute), "short"};
    return VerifyPool{s.pool, false, Seconds(0), ""};
  }
  if (k < 19) {
    // A resize: a node more or less, or down to one (never below what the asks and leases hold: pool_busy).
    account = s.provider;
    const std::int64_t nodes = chance(30) ? 1 : std::max<std::int64_t>(1, pool->nodes + (chance(50) ? 1 : -1));
    return ResizePool{s.pool, static_cast<std::int32_t>(nodes)};
  }
  if (k < 26) {
    // A green policy change between fills: every pool re-classified, its open asks re-priced and matched.
    GreenPolicy p = GreenPolicy::defaults();
    const std::int64_t v = range(0, 3);
    // (A few bps more or less can leave an ask's effective price where it was, on a coarse tick.)
    if (v == 1) p.rules[1].discount_bps = static_cast<std::int32_t>(range(1, 30) * 100);
    if (v == 1 && chance(50)) {
      p.rules[0].discount_bps += static_cast<std::int32_t>(range(-9, 9));
      p.rules[1].discount_bps = static_cast<std::int32_t>(1500 + range(-9, 9));
    }
    if (v == 2) p.rules.clear();
    if (v == 3) p.rules[0].max_pue_x1000 = 1300, p.rules[0].discount_bps = 2500;
    account = kAdminAccount;
    return SetGreenPolicy{p};
  }
  if (k < 31) {
    if (s.halted) return std::nullopt;
    s.halted = true;  // placements and amends refused, cancels and releases go on, time moves the leases
    account = kAdminAccount;
    return HaltMarket{s.market, true};
  }
  if (k < 38) {
    // Exposure limits: an account's open notional counts what its leases still owe, so a limit set near that
    // refuses its next bid, until a preemption or a release lowers what it owes (or the limit is lifted again).
    account = kAdminAccount;
    if (s.limited && chance(50)) {
      const AccountId who = *s.limited;
      s.limited.reset();
      over_limit_[who] = false;
      return SetLimits{who, Limits{}};
    }
    if (leases.empty()) return std::nullopt;
    const AccountId who = pick(leases)->buyer;
    std::int64_t owed = 0;  // micro-dollars: price x GPUs x hours of its leases
    for (const LeaseInfo& l : leases_)
      if (l.buyer == who && !l.ended) owed += l.price.value * l.quantity.value * (l.end - l.start) / kHour;
    Limits lim;
    lim.max_open_notional = owed * range(90, 125) / 100 + range(1, 10) * 1'000'000;
    if (chance(20)) lim.max_open_gpus = Qty(range(1, 6));
    s.limited = who;
    over_limit_[who] = lim.max_open_notional <= 30'000'000;
    return SetLimits{who, lim};
  }
  if (k < 41) {
    // The provider withdraws an ask, or all its orders (in the market or everywhere): the leases its asks sold
    // can no longer be preempted.
    if (open.empty()) return std::nullopt;
    account = s.provider;
    if (chance(50)) return Cancel{pick(open)->id};
    return CancelAll{chance(50) ? std::optional<MarketId>(s.market) : std::nullopt};
  }
  if (k < 45) {
    account = chance(50) ? kB1 : kB2;
    return CancelAll{chance(50) ? std::optional<MarketId>(s.market) : std::nullopt};
  }
  if (k < 53) {
    // An ask amended while its leases live: a lot less (only from what is free over the rest of its window),
    // or a new price (it loses its time priority; preemptions of its leases take the new one).
    if (open.empty()) return std::nullopt;
    const ScenarioAsk& o = *pick(open);
    Amend a;
    a.order = o.id;
    if (chance(40) && o.quantity.value > o.chunk.value) a.quantity = Qty(o.quantity.value - o.chunk.value);
    else a.price = Price(std::max<std::int64_t>(kStep, o.price.value + range(-3, 4) * kStep));
    account = s.provider;
    return a;
  }
  if (k < 63) {
    // Any resting bid of the market amended, as above.
    std::vector<const OrderInfo*> bids;
    for (const OrderInfo& o : orders_)
      if (o.open && o.side == Side::buy && o.market == s.market) bids.push_back(&o);
    if (bids.empty()) return std::nullopt;
    return amend_bid(*pick(bids), 35, 60);
  }
  if (k < 66) {
    account = s.provider;  // refused while anything is open or leased on it
    return RetirePool{s.pool};
  }
  if (k < 74) {
    // A forward bid over the leases' windows, hours ahead: it takes an ask's free capacity there, or preempts a
    // lease that holds the GPUs through its window (the lease ends after the notice, long before it starts).
    const Price price = chance(60) ? over_leases() : Price(range(30, 42) * kStep);
    const Qty chunk = open.empty() ? Qty(1) : open.front()->chunk;
    OrderRequest r = scenario_bid(Qty(range(1, 3) * chunk.value), price, chunk);
    r.start = Seconds(now_ + range(20, 12 * 60) * kMinute);
    r.end = Seconds(r.start->value + range(1, 4) * kHour);
    account = leases.empty() ? kB1 : bidder_for(*leases.front());
    return PlaceOrder{r};
  }
  if (k < 80) {
    // The provider's own interruptible bid: its own open asks cross it (self-trade prevention, in every mode and
    // time in force), and the leases on its pool are its own sales, never preempted by it.
    const Qty chunk = open.empty() ? Qty(1) : open.front()->chunk;
    OrderRequest r = scenario_bid(Qty(range(1, 3) * chunk.value), over_leases(), chunk);
    if (chance(50)) r.duration = Seconds(range(1, 4) * kHour);
    else if (!open.empty()) {
      r.start = Seconds(std::max(now_, open.front()->start));
      r.end = Seconds(std::min(r.start->value + range(1, 6) * kHour, open.front()->end));
    } else {
      r.duration = Seconds(kHour);
    }
    r.stp = static_cast<StpMode>(range(0, 2));
    account = s.provider;
    return PlaceOrder{r};
  }
  // A bid that rests on the preemptible GPUs: post_only and priced over the leases (it never takes, so it never
  // preempts either), or cheap; amends and re-offers meet it later.
  const Qty chunk = open.empty() ? Qty(1) : open.front()->chunk;
  const bool post_only = k < 88;
  const Price price = post_only ? over_leases() : Price(range(26, 36) * kStep);
  OrderRequest r = scenario_bid(Qty(range(1, 3) * chunk.value), price, chunk);
  r.time_in_force = chance(80) ? TimeInForce::gtc : TimeInForce::gtd;
  if (r.time_in_force == TimeInForce::gtd) r.expire_at = Seconds(now_ + range(1, 48) * kHour);
  r.post_only = post_only;
  r.duration = Seconds(range(1, 6) * kHour);
  account = leases.empty() ? kB2 : bidder_for(*leases.front());
  s.awaiting_bid = true;
  return PlaceOrder{r};
}

CommandBody RandomCommands::random_body(AccountId& account) {
  account = kAdminAccount;
  if (pools_.size() < 3) {
    account = chance(50) ? kP1 : kP2;
    return AddPool{random_pool_spec()};
  }
  // With play_lifecycles(), now and then a spot-lease lifecycle (scenario_body) plays out among the random
  // commands, taking seven in ten while it runs.
  if (lifecycles_ && scenario_.stage == Stage::idle && range(0, 999) < kScenarioStartPerMille)
    scenario_.stage = Stage::pool;
  if (lifecycles_ && scenario_.stage != Stage::idle && chance(70)) {
    if (std::optional<CommandBody> body = scenario_body(account)) {
      last_was_scenario_ = true;
      return std::move(*body);
    }
  }
  std::vector<OrderInfo> open;
  for (const OrderInfo& o : orders_)
    if (o.open) open.push_back(o);
  std::vector<LeaseInfo> live_leases;
  for (const LeaseInfo& l : leases_)
    if (!l.ended) live_leases.push_back(l);
  const std::int64_t r = range(0, 999);
  if (r < 25) {
    const std::int64_t a = range(0, 9);
    account = a < 5 ? kP1 : a < 9 ? kP2 : kB2;
    if (pools_.size() >= 9) return Tick{};
    PoolSpec spec = random_pool_spec();
    const std::int64_t bad = malformed_ ? range(0, 19) : 19;  // now and then a pool the engine must refuse
    if (bad == 0) spec.market = MarketId{"B200"};
    if (bad == 1) spec.gpus_per_node = 0;
    if (bad == 2) spec.region.clear();
    if (bad == 3) spec.nodes = -1;
    return AddPool{spec};
  }
  if (r < 55) {
    const PoolInfo& p = pick(pools_);
    account = chance(95) ? p.provider : kB1;
    const std::int64_t k = malformed_ ? range(0, 19) : 19;  // the server takes 1 node or more
    const std::int64_t nodes = k == 0 ? 0 : k == 1 ? -1 : std::max<std::int64_t>(1, p.nodes + range(-2, 2));
    return ResizePool{p.id, static_cast<std::int32_t>(nodes)};
  }
  if (r < 65) {
    const PoolInfo& p = pick(pools_);
    account = p.provider;
    return RetirePool{p.id};
  }
  if (r < 105) {
    const PoolInfo& p = pick(pools_);
    const std::int64_t v = range(0, 9);
    if (v < 6) return VerifyPool{p.id, true, Seconds(now_ + range(10 * kMinute, 5 * kDay)), "audit"};
    if (v < 8) return VerifyPool{p.id, false, Seconds(0), ""};
    return VerifyPool{p.id, true, Seconds(now_ + range(1, 10 * kMinute)), "short"};
  }
  if (r < 315) return place_sell(account);
  if (r < 330) return place_invalid(account);
  if (r < 540) return place_buy(account);
  if (r < 620) return place_spot_bid(account);
  if (r < 660) return repeat_client_order(account);
  if (r < 710) {
    if (open.empty()) return Tick{};
    const OrderInfo& o = pick(open);
    account = chance(92) ? o.account : other_account(o.account);
    if (chance(4)) {  // an order that ended (or never was): not_found
      for (const OrderInfo& x : orders_)
        if (!x.open && x.account == account) return Cancel{x.id};
      return Cancel{OrderId(seq_ + 1000)};
    }
    return Cancel{o.id};
  }
  if (r < 725) {
    static const std::vector<AccountId> accounts{kP1, kP2, kB1, kB2};
    account = pick(accounts);
    return CancelAll{chance(50) ? std::optional<MarketId>(random_market()) : std::nullopt};
  }
  if (r < 790) {
    if (open.empty()) return Tick{};
    // An account whose notional limit was set below what it has open cuts a bid and asks a little more for it:
    // its open notional goes down, so the amend must not be refused for exposure (nor one that raises it let by).
    std::vector<OrderInfo> over;
    for (const OrderInfo& o : open)
      if (o.side == Side::buy && over_limit_[o.account] && o.quantity.value >= 2 * o.min_chunk.value) over.push_back(o);
    if (!over.empty() && chance(40)) {
      const OrderInfo& o = pick(over);
      account = o.account;
      const std::int64_t lots = o.quantity.value / o.min_chunk.value;
      Amend a{o.id, Qty(o.min_chunk.value * range(1, lots - 1)), Price(o.price.value / 50000 * 50000 + range(1, 2) * 50000)};
      return a;
    }
    const OrderInfo& o = pick(open);
    account = chance(92) ? o.account : other_account(o.account);  // someone else's order: not_found
    Amend a;
    a.order = o.id;
    const std::int64_t k = range(0, 2);
    if (k != 1) {
      const std::int64_t lots = o.quantity.value / std::max<std::int64_t>(1, o.min_chunk.value);
      a.quantity = Qty(o.min_chunk.value * range(1, std::max<std::int64_t>(1, lots)));
      if (chance(5)) a.quantity = Qty(o.quantity.value + 1);
      if (o.min_chunk.value > 1 && chance(8)) a.quantity = Qty(a.quantity->value - 1);  // breaks the lot
    }
    if (k != 0) {
      a.price = random_price(15000, 26000, MarketId{"H100"});
      // Half the time a step or two around its own price (raises meet the exposure limit, cuts post_only).
      if (chance(50)) a.price = Price(std::max<std::int64_t>(50000, o.price.value + range(-2, 3) * 50000));
      // A cut with a dearer price: the notional may go down all the same (never refused) or up.
      if (k == 2 && chance(50)) a.price = Price(o.price.value / 50000 * 50000 + range(1, 3) * 50000);
      // Now and then a bid's price several times over: over a tight notional limit (exposure_limit), or not.
      if (o.side == Side::buy && chance(40)) a.price = Price(o.price.value / 50000 * 50000 * range(5, 40));
    }
    return a;
  }
  if (r < 830) {
    if (live_leases.empty()) return Tick{};
    const LeaseInfo& l = pick(live_leases);
    account = chance(90) ? l.buyer : kP2;
    return ReleaseLease{l.id};
  }
  if (r < 838) return HaltMarket{random_market(), chance(25)};
  if (r < 850) {
    static const std::vector<AccountId> accounts{kP1, kP2, kB1, kB2};
    Limits l;
    if (chance(50)) {
      l.max_open_orders = range(2, 8);
      l.max_open_gpus = Qty(range(8, 40));
      // Now and then below what the account already has open: over its limit, it may still lower its exposure.
      l.max_open_notional = (chance(30) ? range(1, 30) : range(50, 2000)) * 1'000'000;
    }
    const AccountId who = pick(accounts);
    over_limit_[who] = l.max_open_notional <= 30'000'000;
    return SetLimits{who, l};
  }
  if (r < 885) {
    GreenPolicy p = GreenPolicy::defaults();
    const std::int64_t k = range(0, 3);
    if (k == 1) p.rules[1].discount_bps = 1000;
    if (k == 2) p.rules.clear();
    if (k == 3) p.rules[0].max_pue_x1000 = 1300;
    return SetGreenPolicy{p};
  }
  return Tick{};
}

// Any trading account but `a`.
AccountId RandomCommands::other_account(AccountId a) {
  static const std::vector<AccountId> accounts{kP1, kP2, kB1, kB2};
  AccountId b = pick(accounts);
  return b == a ? (a == kB1 ? kB2 : kB1) : b;
}

Command RandomCommands::next() {
  // Time moves in small steps mostly, with jumps so that windows start, expiries fire and leases complete.
  const std::int64_t t = range(0, 99);
  const std::int64_t before = now_;
  now_ += t < 40 ? 0 : t < 80 ? range(1, 120) : t < 95 ? range(120, 2 * kHour) : t < 99 ? range(2 * kHour, 2 * kDay)
                                                                                    : range(2 * kDay, 20 * kDay);
  // A running scenario needs its leases alive until it preempts them: small steps; then time runs on through
  // notices, releases and the leases' ends.
  if (scenario_.stage != Stage::idle && scenario_.stage != Stage::pool) {
    if (scenario_.stage != Stage::after && scenario_.stage != Stage::retire) now_ = before + (t < 50 ? 0 : range(1, 120));
    else now_ = before + (t < 30 ? range(121, 15 * kMinute) : t < 75 ? range(15 * kMinute, 12 * kHour)
                                                                    : range(12 * kHour, 3 * kDay));
  }
  AccountId account;
  last_was_scenario_ = false;
  CommandBody body = random_body(account);
  // Now and then a restart in the middle of a lifecycle (drawn only while one runs, so plain sequences stay).
  restore_after_last_ = last_was_scenario_ && scenario_.stage >= Stage::first_lease && chance(6);
  if (const auto* p = std::get_if<PlaceOrder>(&body); p && !p->order.client_order_id.empty())
    placed_with_cid_.push_back(Placed{account, p->order});
  // Now and then a stamp earlier than the last one: the engine must treat it as the time it already has.
  const std::int64_t stamp = chance(2) ? now_ - range(1, 600) : now_;
  return Command{++seq_, Seconds(stamp), account, std::move(body)};
}

void RandomCommands::observe(const EventSink& events) {
  for (const Event& e : events) {
    if (const auto* a = std::get_if<OrderAccepted>(&e)) {
      if (scenario_.awaiting_ask && a->order.is_sell() && a->order.request.pool == scenario_.pool) {
        scenario_.pending.id = a->order.id;
        scenario_.asks.push_back(scenario_.pending);
      }
      if (scenario_.awaiting_bid && a->order.is_buy()) scenario_.resting.push_back(a->order.id);
      orders_.push_back(OrderInfo{a->order.id, a->order.account, a->order.request.side, a->order.request.quantity,
                                  a->order.request.min_chunk, true, a->order.market, a->order.effective_price,
                                  a->order.window_start.value, a->order.window_end.value, a->order.request.price});
    } else if (const auto* d = std::get_if<OrderDone>(&e)) {
      for (OrderInfo& o : orders_)
        if (o.id == d->order.id) o.open = false;
      if (ScenarioAsk* ask = scenario_ask(d->order.id)) ask->open = false;
    } else if (const auto* u = std::get_if<OrderUpdated>(&e)) {
      for (OrderInfo& o : orders_)
        if (o.id == u->order.id) o.quantity = u->order.request.quantity, o.limit = u->order.request.price;
      if (ScenarioAsk* ask = scenario_ask(u->order.id)) {
        ask->price = u->order.request.price;
        ask->quantity = u->order.request.quantity;
      }
    } else if (const auto* l = std::get_if<LeaseChanged>(&e)) {
      const Lease& n = l->lease;
      const LeaseInfo info{n.id,          n.buyer,      n.ended,         n.pool,       n.quantity, n.price,
                           n.split_from, n.status,     n.sell_order,    n.start.value, n.end.value};
      bool known = false;
      for (LeaseInfo& x : leases_) {
        if (x.id != n.id) continue;
        known = true;
        x = info;
      }
      if (!known) leases_.push_back(info);
    } else if (const auto* p = std::get_if<PoolChanged>(&e)) {
      bool known = false;
      for (PoolInfo& x : pools_) {
        if (x.id != p->pool.id) continue;
        known = true;
        x.nodes = p->pool.spec.nodes;
        x.retired = p->pool.retired;
      }
      if (!known && scenario_.awaiting_pool) scenario_.pool = p->pool.id;
      if (!known)
        pools_.push_back(PoolInfo{p->pool.id, p->pool.provider, p->pool.spec.market, p->pool.spec.tier,
                                  p->pool.spec.gpus_per_node, p->pool.spec.nodes, p->pool.retired});
    }
  }
  scenario_.awaiting_pool = scenario_.awaiting_ask = scenario_.awaiting_bid = false;
}

}  // namespace gpuex::matching::test
