// A seeded generator of random command sequences mixing every engine command, for differential and
// determinism tests. It learns ids (orders, leases, pools) from the events it is shown.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "matching/engine.hpp"

namespace gpuex::matching::test {

class RandomCommands {
 public:
  RandomCommands(std::uint64_t seed, std::int64_t start_time);

  // The markets, ticks and defaults the sequences are written for.
  static EngineConfig config();

  Command next();
  // Only commands the server passes on to the engine: no malformed orders, unknown markets or pools, or someone
  // else's pool (the server answers those 4xx and stores nothing, so no stored state or snapshot holds one).
  void only_wire_valid() { malformed_ = false; }
  // Plays spot-lease lifecycles (Scenario) among the random commands. Without it a seed gives the same sequence
  // as before the scenario existed: its draws are made only in this mode.
  void play_lifecycles() { lifecycles_ = true; }
  // Whether the last command next() gave was a step of a lifecycle.
  bool last_was_lifecycle() const { return last_was_scenario_; }
  // Whether a lifecycle asks for the engine to be restored from its snapshot after the last command (a restart in
  // the middle of a lifecycle: leases in notice, split off, sold by asks re-priced, cancelled or filled).
  bool restore_after_last() const { return restore_after_last_; }
  // Shows the generator what the last command did, so later commands name real orders, pools and leases.
  void observe(const EventSink& events);

 private:
  struct PoolInfo {
    PoolId id;
    AccountId provider;
    MarketId market;
    Tier tier{Tier::bare_metal};
    std::int32_t gpus_per_node{1};
    std::int32_t nodes{1};
    bool retired{false};
  };
  struct OrderInfo {
    OrderId id;
    AccountId account;
    Side side{Side::buy};
    Qty quantity;
    Qty min_chunk{1};
    bool open{true};
    MarketId market;
    Price price;
    std::int64_t window_start{0};  // sells: the clipped window
    std::int64_t window_end{0};
    Price limit;  // the order's own price as amends left it (read by the lifecycles only)
  };
  struct LeaseInfo {
    LeaseId id;
    AccountId buyer;
    bool ended{false};
    PoolId pool;
    Qty quantity;
    Price price;
    LeaseId split_from;
    LeaseStatus status{LeaseStatus::reserved};
    OrderId sell_order;
    std::int64_t start{0};
    std::int64_t end{0};
  };
  // A spot-lease lifecycle, played out over a few dozen commands among the random ones: a fresh spot pool, one
  // to three asks sharing it (different prices, now and then one whose window starts later), a long
  // interruptible lease on part of it, the asks' prices (and now and then quantities) amended, the asks filled
  // completely by several bids, then dear short interruptible bids that preempt part of the cheapest lease (or
  // several leases, across asks) and then part or all of the rest split off from it, then releases, ticks
  // through the leases' ends, a re-offer of released GPUs, and now and then the pool's retirement. Interruptible
  // bids meet spot asks rarely enough in the plain random mix that this chain (where session 19's split-off
  // lease lost its filled ask's list price) was never reached. Among those steps (twist()), the rest of the
  // market's commands strike the lifecycle while its leases live: verifications, resizes, green policies, halts,
  // exposure limits near what the leases owe, cancels and cancel-alls, amends of its asks and resting bids, a
  // retirement refused, forward bids over the leases' windows, the provider's own bids (self-trade prevention),
  // post_only and fok bids against the preemptible GPUs, bids by a lease's own buyer.
  enum class Stage { idle, pool, ask, first_lease, amend, fill, sweep, preempt, preempt_split, after, retire };
  struct ScenarioAsk {
    OrderId id;
    Price price;
    Qty quantity;
    Qty chunk{1};
    std::int64_t start{0};  // as sent (the engine clips it to the time it arrives)
    std::int64_t end{0};
    bool open{true};
  };
  struct Scenario {
    Stage stage{Stage::idle};
    bool awaiting_pool{false};  // the last command was its AddPool
    bool awaiting_ask{false};   // the last command placed one of its asks
    PoolId pool;
    AccountId provider;
    MarketId market;
    std::vector<ScenarioAsk> asks;  // in the order placed
    ScenarioAsk pending;            // the ask being placed (awaiting_ask)
    int asks_left{0};               // asks still to place (Stage::ask)
    int left{0};  // steps left in the current stage (amend, fill, sweep, preempt_split, after, retire)
    bool twists{false};             // the rest of the market strikes this one (twist())
    bool awaiting_bid{false};       // the last command placed a bid meant to rest
    std::vector<OrderId> resting;   // the bids it placed to rest (amends find them)
    bool halted{false};             // it halted its market and has not resumed it yet
    std::optional<AccountId> limited;  // an account whose limits it set near what its leases owe
  };
  struct Placed {
    AccountId account;
    OrderRequest request;
  };

  std::uint64_t u64();
  std::int64_t range(std::int64_t lo, std::int64_t hi);  // inclusive
  bool chance(int percent);
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(range(0, static_cast<std::int64_t>(v.size()) - 1))];
  }

  MarketId random_market();
  Price random_price(std::int64_t lo4, std::int64_t hi4, const MarketId& m);
  PoolSpec random_pool_spec();
  CommandBody random_body(AccountId& account);
  CommandBody place_sell(AccountId& account);
  CommandBody place_buy(AccountId& account);
  CommandBody place_spot_bid(AccountId& account);
  CommandBody repeat_client_order(AccountId& account);
  CommandBody place_invalid(AccountId& account);
  std::optional<CommandBody> scenario_body(AccountId& account);
  std::optional<CommandBody> twist(AccountId& account);
  OrderRequest scenario_bid(Qty quantity, Price price, Qty chunk);
  const LeaseInfo* cheapest_scenario_lease(AccountId not_of, bool split_only) const;
  std::vector<const LeaseInfo*> preemptible_scenario_leases() const;
  ScenarioAsk* scenario_ask(OrderId id);
  std::vector<ScenarioAsk*> open_scenario_asks();
  Price ask_price_of(const LeaseInfo& l);
  AccountId bidder_for(const LeaseInfo& l);
  AccountId other_account(AccountId a);
  void add_options(OrderRequest& r, bool sell);

  std::uint64_t state_;
  Seq seq_{0};
  std::int64_t now_;
  std::int64_t next_cid_{1};
  std::vector<PoolInfo> pools_;
  std::vector<OrderInfo> orders_;
  std::vector<LeaseInfo> leases_;
  std::vector<Placed> placed_with_cid_;
  std::map<AccountId, bool> over_limit_;
  Scenario scenario_;
  bool lifecycles_{false};
  bool last_was_scenario_{false};
  bool restore_after_last_{false};
  bool malformed_{true};  // its last SetLimits put its notional limit very low
};

}  // namespace gpuex::matching::test
