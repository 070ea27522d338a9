// Randomized sequences of every command: invariants after every step, replay determinism, and
// snapshot/restore equality. (The differential test against a reference matcher lives beside it.)
#include <cstdlib>
#include <random>

#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  std::vector<Command> sequence(int n) {
    std::vector<Command> out;
    for (int i = 0; i < n; ++i) out.push_back(next());
    return out;
  }

 private:
  std::int64_t pick(std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_); }
  bool chance(int percent) { return pick(1, 100) <= percent; }

  Price price() { return usd4(pick(90, 110) * 100); }  // 0.9000 .. 1.1000 in 0.01 steps

  PoolSpec spec() {
    PoolSpec s = pool_spec(static_cast<std::int32_t>(pick(1, 2) * 4), static_cast<std::int32_t>(pick(1, 3)),
                           static_cast<Tier>(pick(0, 2)), chance(50) ? "US" : "DE");
    s.market = chance(80) ? kH100 : kA100;
    s.nvlink = chance(50);
    s.fabric = static_cast<Fabric>(pick(0, 2));
    s.energy = chance(50) ? EnergyAttributes{1100, 9000, 5000} : EnergyAttributes{1250, 6000, 30000};
    if (chance(30)) s.energy = EnergyAttributes{1500, 1000, 50000};
    return s;
  }

  OrderRequest order(AccountId acct) {
    OrderRequest r;
    const std::int64_t chunk = chance(70) ? 1 : pick(2, 4);
    r.min_chunk = Qty(chunk);
    r.quantity = Qty(chunk * pick(1, 4));
    r.price = price();
    r.client_order_id = chance(30) ? "c" + std::to_string(pick(1, 8)) : "";
    const int tif = static_cast<int>(pick(0, 9));
    r.time_in_force = tif < 5 ? TimeInForce::gtc : tif < 7 ? TimeInForce::gtd : tif < 9 ? TimeInForce::ioc : TimeInForce::fok;
    if (r.time_in_force == TimeInForce::gtd) r.expire_at = now_ + Seconds(pick(0, 4) * 900);
    r.post_only = (r.time_in_force == TimeInForce::gtc || r.time_in_force == TimeInForce::gtd) && chance(15);
    r.stp = static_cast<StpMode>(pick(0, 2));
    if (chance(45) && !pools_.empty()) {
      r.side = Side::sell;
      const auto& [pool, owner] = pools_[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(pools_.size()) - 1))];
      (void)acct;
      r.pool = pool;
      const std::int64_t s = now_.value + pick(-2, 6) * 900;
      r.start = Seconds(s);
      r.end = Seconds(s + pick(1, 48) * 900);
      r.min_duration = Seconds(chance(60) ? 0 : pick(1, 4) * 900);
      return r;
    }
    r.side = Side::buy;
    r.price = usd4(pick(90, 130) * 100);
    r.market = chance(85) ? kH100 : kA100;
    if (chance(50)) {
      r.duration = Seconds(pick(1, 4) * 900);
    } else {
      const std::int64_t s = now_.value + pick(-1, 8) * 900;
      r.start = Seconds(s);
      r.end = Seconds(s + (chance(30) ? pick(16, 48) : pick(1, 8)) * 900);
    }
    BidConstraints& c = r.constraints;
    c.interruptible = chance(40);
    if (chance(15)) c.regions = {"US"};
    if (chance(10)) c.tiers = {Tier::bare_metal, Tier::spot};
    if (chance(10)) c.nvlink = true;
    if (chance(10)) c.min_fabric = Fabric::roce;
    if (chance(10)) c.green_only = true;
    if (chance(5)) c.max_pue_x1000 = 1200;
    if (chance(10) && (r.time_in_force == TimeInForce::ioc || r.time_in_force == TimeInForce::fok)) {
      c.single_pool = true;
    }
    return r;
  }

  Command next() {
    ++seq_;
    if (chance(25)) now_ += Seconds(pick(0, 3) * 300 + pick(0, 1));
    const AccountId acct(pick(1, 5));
    Command c{seq_, now_, acct, Tick{}};
    const std::int64_t roll = pick(1, 100);
    if (pools_.size() < 2 || roll <= 4) {
      c.body = AddPool{spec()};
      pools_.emplace_back(PoolId(seq_), acct);
    } else if (roll <= 60) {
      PlaceOrder p{order(acct)};
      if (p.order.side == Side::sell) {
        for (const auto& [pool, owner] : pools_) {
          if (pool == p.order.pool) c.account = owner;
        }
      }
      if (chance(8) && !bodies_.empty()) {  // a retry of an earlier order, same body
        const auto& [owner, body] = bodies_[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(bodies_.size()) - 1))];
        c.account = owner;
        p = body;
      }
      c.body = p;
      placed_.emplace_back(OrderId(seq_), c.account);
      if (!p.order.client_order_id.empty()) bodies_.emplace_back(c.account, p);
    } else if (roll <= 70 && !placed_.empty()) {
      const auto& [id, owner] = placed_[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(placed_.size()) - 1))];
      c.account = owner;
      c.body = Cancel{id};
    } else if (roll <= 78 && !placed_.empty()) {
      const auto& [id, owner] = placed_[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(placed_.size()) - 1))];
      c.account = owner;
      Amend a{id, std::nullopt, std::nullopt};
      if (chance(50)) a.quantity = Qty(pick(1, 8));
      if (chance(60)) a.price = price();
      c.body = a;
    } else if (roll <= 82) {
      c.body = ReleaseLease{LeaseId(pick(1, std::max<std::int64_t>(2, seq_ / 4)))};
      c.account = AccountId(pick(1, 5));
    } else if (roll <= 84) {
      c.body = CancelAll{chance(50) ? std::optional<MarketId>(kH100) : std::nullopt};
    } else if (roll <= 87) {
      const auto& [pool, owner] = pools_[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(pools_.size()) - 1))];
      c.body = VerifyPool{pool, chance(70), now_ + Seconds(pick(0, 8) * 900), "e"};
    } else if (roll <= 89) {
      const auto& [pool, owner] = pools_[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(pools_.size()) - 1))];
      c.account = owner;
      if (chance(70)) {
        c.body = ResizePool{pool, static_cast<std::int32_t>(pick(0, 4))};
      } else {
        c.body = RetirePool{pool};
      }
    } else if (roll <= 91) {
      c.body = HaltMarket{chance(80) ? kH100 : kA100, chance(15)};
    } else if (roll <= 92) {
      Limits l;
      l.max_open_gpus = Qty(pick(4, 40));
      l.max_open_orders = pick(1, 10);
      l.max_open_notional = pick(1, 200) * 1'000'000;
      c.body = SetLimits{AccountId(pick(1, 5)), l};
    } else if (roll <= 93) {
      GreenPolicy p = GreenPolicy::defaults();
      p.rules[1].discount_bps = static_cast<std::int32_t>(pick(0, 30) * 100);
      c.body = SetGreenPolicy{p};
    } else {
      now_ += Seconds(pick(1, 8) * 450);
      c.now = now_;
    }
    return c;
  }

  std::mt19937_64 rng_;
  Seq seq_{0};
  Seconds now_{T0};
  std::vector<std::pair<PoolId, AccountId>> pools_;
  std::vector<std::pair<OrderId, AccountId>> placed_;
  std::vector<std::pair<AccountId, PlaceOrder>> bodies_;
};

std::uint64_t base_seed() {
  if (const char* s = std::getenv("GPUEX_SEED")) return std::strtoull(s, nullptr, 10);
  return 20270101;
}

}  // namespace

TEST_CASE("random command sequences keep every invariant, replay and restore exactly", "[random]") {
  const std::uint64_t seed0 = base_seed();
  std::map<std::string, int> seen;  // what the sequences exercised, so the test cannot pass vacuously
  for (std::uint64_t k = 0; k < 60; ++k) {
    const std::uint64_t seed = seed0 + k;
    INFO("GPUEX_SEED=" << seed0 << " sequence " << k);
    Generator gen(seed);
    const std::vector<Command> cmds = gen.sequence(150);
    Engine a(Fixture::default_config());
    Engine b(Fixture::default_config());
    std::vector<EventSink> ea;
    const std::size_t cut = 40 + static_cast<std::size_t>(seed % 80);
    std::optional<Engine> restored;
    for (std::size_t i = 0; i < cmds.size(); ++i) {
      INFO("command " << i << " seq " << cmds[i].seq);
      ea.emplace_back();
      a.apply(cmds[i], ea.back());
      EventSink eb;
      b.apply(cmds[i], eb);
      REQUIRE(ea.back() == eb);
      for (const Event& e : eb) {
        if (const auto* t = std::get_if<TradeEvent>(&e)) {
          ++seen["trade"];
          if (t->trade.preemption) ++seen["preemption"];
          if (t->trade.taker == Side::sell) ++seen["ask_taker"];
          if (t->trade.bucket != Bucket::spot()) ++seen["forward"];
        } else if (const auto* d = std::get_if<OrderDone>(&e)) {
          ++seen[std::string("done_") + std::string(to_string(d->order.status)) + "_" +
                 std::string(to_string(d->order.reason))];
        } else if (const auto* r = std::get_if<OrderRejected>(&e)) {
          ++seen[std::string("rejected_") + std::string(to_string(r->order.reason))];
        } else if (const auto* c = std::get_if<CommandRejected>(&e)) {
          ++seen[std::string("cmd_") + std::string(to_string(c->reason))];
        } else if (std::holds_alternative<OrderDuplicate>(e)) {
          ++seen["duplicate"];
        } else if (const auto* l = std::get_if<LeaseChanged>(&e)) {
          ++seen[std::string("lease_") + std::string(to_string(l->lease.status))];
        }
      }
      const std::string broken = a.check_invariants();
      INFO(dump(ea.back()));
      REQUIRE(broken == "");
      if (i == cut) {
        // Recovery starts from committed state: terminal client_order_ids are the store's business.
        a.committed_through(cmds[i].seq);
        b.committed_through(cmds[i].seq);
        restored.emplace(Engine::restore(Fixture::default_config(), a.snapshot()));
      }
      if (restored && i > cut) {
        EventSink er;
        restored->apply(cmds[i], er);
        REQUIRE(er == ea.back());
      }
    }
    CHECK(a.digest() == b.digest());
    REQUIRE(restored);
    CHECK(restored->digest() == a.digest());
  }
  std::string summary;
  for (const auto& [k, v] : seen) summary += k + "=" + std::to_string(v) + " ";
  INFO(summary);
  if (std::getenv("GPUEX_SEED")) return;  // coverage is asserted for the fixed seed only
  for (const char* k : {"trade", "preemption", "ask_taker", "forward", "done_cancelled_self_trade",
                        "done_rejected_would_take", "done_expired_expired", "rejected_exposure_limit",
                        "rejected_insufficient_pool_capacity", "duplicate", "lease_completed", "lease_released"}) {
    CHECK(seen[k] > 0);
  }
  WARN(summary);
}
