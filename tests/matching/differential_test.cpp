// Randomized differential test: the fast engine and the reference matcher get the same random commands and
// must produce identical events; market invariants are checked after every command.
//
// Replay one sequence: GPUEX_SEED=<seed printed on failure> gpuex_matching_tests "[differential]"
// Each seed runs as a plain sequence and then (half as many, at least twelve) as one that plays spot-lease
// lifecycles (RandomCommands::play_lifecycles): GPUEX_LIFECYCLES=0 or 1 runs only the one or the other kind.
// Those go on with an engine restored from its snapshot wherever a lifecycle asks for a restart
// (RandomCommands::restore_after_last), so a GPUEX_SEED replay restores where the whole run did.
// The run prints once what the sequences reached ("differential coverage: ..."), and checks minimum counts.
// Other knobs (for hand runs): GPUEX_SEQUENCES=n and GPUEX_COMMANDS=n (a longer soak from GPUEX_SEED on),
// GPUEX_DIFF_STATS=1 (print the event mix), GPUEX_DIFF_SUMMARY=1 (one line per failing sequence beyond the first
// three), GPUEX_KNOWN_BUGS=1 (the reference mimics the engine bug shown by the last test case, to look past it).
// "[.debug]" (hidden): the first snapshot point of one random sequence after which a restored engine differs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "matching/engine.hpp"
#include "random_commands.hpp"
#include "reference_matcher.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

namespace {

constexpr std::int64_t kStart = 1798761600;  // 2027-01-01T00:00:00Z
constexpr std::uint64_t kDefaultSeed = 20270101;
constexpr int kSequences = 500;  // 75,000 commands, and 37,500 playing lifecycles: about two seconds in Release
constexpr int kCommandsPerSequence = 150;

std::string describe_request(const OrderRequest& r) {
  std::ostringstream s;
  s << to_string(r.side) << " price=" << format_price(r.price) << " qty=" << r.quantity.value;
  if (r.side == Side::sell) s << " pool=" << r.pool.value << " min_duration=" << r.min_duration.value;
  else s << " market=" << r.market.value();
  if (r.start) s << " start=" << r.start->value;
  if (r.end) s << " end=" << r.end->value;
  if (r.duration) s << " duration=" << r.duration->value;
  s << " chunk=" << r.min_chunk.value << " tif=" << to_string(r.time_in_force);
  if (r.expire_at) s << " expire_at=" << r.expire_at->value;
  if (r.post_only) s << " post_only";
  s << " stp=" << to_string(r.stp);
  if (!r.client_order_id.empty()) s << " cid=" << r.client_order_id;
  const BidConstraints& c = r.constraints;
  if (!c.tiers.empty()) {
    s << " tiers=";
    for (Tier t : c.tiers) s << to_string(t) << ",";
  }
  if (!c.regions.empty()) {
    s << " regions=";
    for (const std::string& x : c.regions) s << x << ",";
  }
  if (c.nvlink) s << " nvlink";
  if (c.min_fabric) s << " min_fabric=" << to_string(*c.min_fabric);
  if (c.min_fabric_gbps) s << " min_gbps=" << *c.min_fabric_gbps;
  if (c.min_sla_pct_x1000) s << " min_sla=" << *c.min_sla_pct_x1000;
  if (c.green_only) s << " green_only";
  if (c.max_pue_x1000) s << " max_pue=" << *c.max_pue_x1000;
  if (c.min_renewable_pct_x100) s << " min_renewable=" << *c.min_renewable_pct_x100;
  if (c.max_carbon_g_per_kwh_x100) s << " max_carbon=" << *c.max_carbon_g_per_kwh_x100;
  if (c.single_pool) s << " single_pool";
  if (c.interruptible) s << " interruptible";
  return s.str();
}

// One line per command, enough to rebuild it by hand in a regression test.
std::string describe(const Command& c) {
  std::ostringstream s;
  s << "seq=" << c.seq << " now=" << c.now.value << " account=" << c.account.value << " ";
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, AddPool>) {
          const PoolSpec& p = b.spec;
          s << "AddPool market=" << p.market.value() << " region=" << p.region << " tier=" << to_string(p.tier)
            << " gpus_per_node=" << p.gpus_per_node << " nodes=" << p.nodes << " nvlink=" << p.nvlink
            << " fabric=" << to_string(p.fabric) << " gbps=" << p.fabric_gbps << " sla=" << p.sla_pct_x1000
            << " energy=" << p.energy.pue_x1000 << "/" << p.energy.renewable_pct_x100 << "/"
            << p.energy.carbon_g_per_kwh_x100;
        } else if constexpr (std::is_same_v<T, ResizePool>) {
          s << "ResizePool pool=" << b.pool.value << " nodes=" << b.nodes;
        } else if constexpr (std::is_same_v<T, RetirePool>) {
          s << "RetirePool pool=" << b.pool.value;
        } else if constexpr (std::is_same_v<T, VerifyPool>) {
          s << "VerifyPool pool=" << b.pool.value << " verified=" << b.verified << " expires_at=" << b.expires_at.value;
        } else if constexpr (std::is_same_v<T, PlaceOrder>) {
          s << "PlaceOrder " << describe_request(b.order);
        } else if constexpr (std::is_same_v<T, Cancel>) {
          s << "Cancel order=" << b.order.value;
        } else if constexpr (std::is_same_v<T, CancelAll>) {
          s << "CancelAll market=" << (b.market ? b.market->value() : "*");
        } else if constexpr (std::is_same_v<T, Amend>) {
          s << "Amend order=" << b.order.value;
          if (b.quantity) s << " qty=" << b.quantity->value;
          if (b.price) s << " price=" << format_price(*b.price);
        } else if constexpr (std::is_same_v<T, ReleaseLease>) {
          s << "ReleaseLease lease=" << b.lease.value;
        } else if constexpr (std::is_same_v<T, HaltMarket>) {
          s << "HaltMarket market=" << b.market.value() << " halted=" << b.halted;
        } else if constexpr (std::is_same_v<T, SetLimits>) {
          s << "SetLimits account=" << b.account.value << " orders=" << b.limits.max_open_orders
            << " gpus=" << b.limits.max_open_gpus.value << " notional=" << b.limits.max_open_notional;
        } else if constexpr (std::is_same_v<T, SetGreenPolicy>) {
          s << "SetGreenPolicy rules=" << b.policy.rules.size();
          for (const GreenTierRule& r : b.policy.rules)
            s << " [" << to_string(r.tier) << " pue<=" << r.max_pue_x1000 << " ren>=" << r.min_renewable_pct_x100
              << " co2<=" << r.max_carbon_g_per_kwh_x100 << " bps=" << r.discount_bps << "]";
        } else if constexpr (std::is_same_v<T, Tick>) {
          s << "Tick";
        }
      },
      c.body);
  return s.str();
}

// body_hash is the engine's private encoding of a PlaceOrder body (no public function computes it); the
// behaviour it drives (duplicate or conflict) is compared through the events instead.
void drop_body_hashes(EventSink& events) {
  for (Event& e : events)
    std::visit(
        [](auto& v) {
          if constexpr (requires { v.order.body_hash; }) v.order.body_hash = 0;
        },
        e);
}

std::vector<ref::Segment> segments_of(const Steps& steps) {
  std::vector<ref::Segment> out;
  for (const Step& p : steps.pieces()) out.push_back(ref::Segment{p.from, p.to, p.gpus});
  return out;
}

std::string dump_segments(const std::vector<ref::Segment>& v) {
  std::ostringstream s;
  s << "[";
  for (const ref::Segment& x : v) s << "[" << x.from.value << "," << x.to.value << "," << x.gpus << "]";
  s << "]";
  return s.str();
}

// The reference keeps a sell's free capacity in its own form and reports it beside its events (event_free()),
// leaving Order::free empty; this compares the engine's with it, event by event, and then empties the engine's
// too, so that the events compare whole. Returns "" or what differs.
std::string take_free(EventSink& fast, const ReferenceMatcher& reference) {
  std::map<std::size_t, std::vector<ref::Segment>> expected;
  for (const auto& [index, pieces] : reference.event_free()) expected[index] = pieces;
  std::ostringstream fail;
  for (std::size_t j = 0; j < fast.size(); ++j)
    std::visit(
        [&](auto& v) {
          if constexpr (requires { v.order.free; }) {
            if (v.order.is_sell()) {
              const std::vector<ref::Segment> got = segments_of(v.order.free);
              auto it = expected.find(j);
              const std::vector<ref::Segment> want = it == expected.end() ? std::vector<ref::Segment>{} : it->second;
              if (got != want)
                fail << "  event " << j << " (order " << v.order.id.value << "): engine free " << dump_segments(got)
                     << ", reference " << dump_segments(want) << "\n";
            }
            v.order.free = Steps();
          }
        },
        fast[j]);
  return fail.str();
}

std::string dump_events(const EventSink& events) {
  std::string s;
  for (const Event& e : events) s += "    " + to_string(e) + "\n";
  return s;
}

// Counts of what the reference's events show, to make sure the random mix is rich.
struct Mix {
  std::map<std::string, std::int64_t> counts;
  std::map<OrderId, BidConstraints> bids;  // of the current sequence (ids restart with each)
  // For the coverage of the spot-lease lifecycle (random_commands.hpp, Scenario), of the current sequence: the
  // leases as last seen, each ask's list price as last seen and whether it was re-priced, the asks that ended
  // filled, and how many trades each ask made.
  std::map<LeaseId, Lease> leases;
  std::map<OrderId, Price> ask_price;
  std::map<OrderId, bool> ask_repriced;
  std::map<OrderId, bool> ask_filled;
  std::map<OrderId, int> ask_trades;
  std::map<PoolId, std::set<OrderId>> pool_asks_sold;  // the asks of each pool that sold a lease
  bool restored{false};  // the sequence went on with an engine restored in the middle of a lifecycle
  void new_sequence() {
    bids.clear();
    leases.clear();
    ask_price.clear();
    ask_repriced.clear();
    ask_filled.clear();
    ask_trades.clear();
    pool_asks_sold.clear();
    restored = false;
  }
  // Whether the leases as last seen hold one that `pred` picks and that has not ended.
  template <class Pred>
  bool live_lease(Pred pred) const {
    for (const auto& [id, l] : leases)
      if (!l.ended && pred(l)) return true;
    return false;
  }
  // What a command did to the leases as they were before it (call before count()): the rules of DESIGN.md §4
  // that meet preemptible capacity, as the lifecycles' twists (random_commands.hpp) reach them.
  void count_reach(const Command& cmd, const EventSink& events, const ReferenceMatcher& ref) {
    const auto* place = std::get_if<PlaceOrder>(&cmd.body);
    const bool amend = std::holds_alternative<Amend>(cmd.body);
    std::map<OrderId, std::set<OrderId>> preempting;  // bid -> the asks whose leases it preempted
    std::map<OrderId, int> preemptions;
    for (const Event& e : events) {
      if (const auto* t = std::get_if<TradeEvent>(&e)) {
        const Trade& tr = t->trade;
        if (!tr.preemption) {
          if (!tr.bucket.is_spot() && tr.tier == Tier::spot) add("cov_forward_trade_spot_pool");
          std::set<OrderId>& sold = pool_asks_sold[tr.pool];
          if (sold.insert(tr.sell_order).second && sold.size() >= 2) add("cov_pool_second_ask_sold");
          continue;
        }
        preempting[tr.buy_order].insert(tr.sell_order);
        ++preemptions[tr.buy_order];
        if (amend) add("cov_preempt_by_amend");
        if (place && place->order.time_in_force == TimeInForce::fok) add("cov_preempt_fok");
        if (!tr.bucket.is_spot()) add("cov_preempt_forward");
        if (restored) add("cov_preempt_after_restore");
        auto it = leases.find(tr.preempted_lease);
        if (it != leases.end() && it->second.green_discount_bps != tr.green_discount_bps)
          add("cov_preempt_discount_moved");
        if (live_lease([&](const Lease& l) {
              return l.buyer == tr.buyer && l.pool == tr.pool &&
                     (l.status == LeaseStatus::active || l.status == LeaseStatus::reserved);
            }))
          add("cov_preempt_bidder_holds_lease");
      } else if (const auto* d = std::get_if<OrderDone>(&e)) {
        const Order& o = d->order;
        if (o.reason == Reason::self_trade && place && place->order.constraints.interruptible)
          add("cov_stp_interruptible_bid");
        if (o.is_sell() && o.status == OrderStatus::cancelled && o.reason == Reason::none &&
            live_lease([&](const Lease& l) { return l.sell_order == o.id; }))
          add("cov_cancel_leased_ask");
      } else if (const auto* u = std::get_if<OrderUpdated>(&e)) {
        const Order& o = u->order;
        const bool leased = o.is_sell() && live_lease([&](const Lease& l) { return l.sell_order == o.id; });
        if (amend && leased && std::get<Amend>(cmd.body).order == o.id) add("cov_amend_leased_ask");
        if (amend && o.is_buy() && std::get<Amend>(cmd.body).order == o.id && std::get<Amend>(cmd.body).quantity &&
            o.request.constraints.interruptible)
          add("cov_amend_interruptible_bid_quantity");
        if (leased && std::holds_alternative<SetGreenPolicy>(cmd.body)) add("cov_policy_repriced_leased_ask");
      } else if (const auto* a = std::get_if<OrderAccepted>(&e)) {
        const Order& o = a->order;
        if (o.request.post_only && o.request.constraints.interruptible && ref.preemptable_unless_post_only(o.id) > 0)
          add("cov_post_only_rests_over_preemptible");
      } else if (const auto* r = std::get_if<OrderRejected>(&e)) {
        if (r->order.reason == Reason::exposure_limit &&
            live_lease([&](const Lease& l) { return l.buyer == r->order.account; }))
          add("cov_exposure_limit_with_leases");
      } else if (const auto* c = std::get_if<CommandRejected>(&e)) {
        if (c->reason == Reason::exposure_limit && live_lease([&](const Lease& l) { return l.buyer == cmd.account; }))
          add("cov_exposure_limit_with_leases");
      }
    }
    for (const auto& [bid, asks] : preempting) {
      if (preemptions[bid] >= 2) add("cov_preempt_several_leases");
      if (asks.size() >= 2) add("cov_preempt_across_asks");
    }
    // Pool commands on a pool whose leases live, or lived.
    const PoolId target = std::holds_alternative<ResizePool>(cmd.body)   ? std::get<ResizePool>(cmd.body).pool
                          : std::holds_alternative<RetirePool>(cmd.body) ? std::get<RetirePool>(cmd.body).pool
                                                                          : PoolId();
    if (target.value != 0) {
      bool refused = false;
      for (const Event& e : events) refused = refused || std::holds_alternative<CommandRejected>(e);
      const bool live = live_lease([&](const Lease& l) { return l.pool == target; });
      bool had = false;
      for (const auto& [id, l] : leases) had = had || l.pool == target;
      const char* what = std::holds_alternative<ResizePool>(cmd.body) ? "cov_resize_" : "cov_retire_";
      if (live) add(std::string(what) + (refused ? "refused" : "done") + "_with_live_leases");
      if (!live && had && !refused && !std::holds_alternative<ResizePool>(cmd.body)) add("cov_retire_after_leases");
    }
  }
  // What a command of that kind was answered with, when it was refused: "cancel_not_found", "amend_off_tick".
  void count_refusal(const Command& cmd, const EventSink& events) {
    const char* kind = std::holds_alternative<Cancel>(cmd.body)         ? "cancel_"
                       : std::holds_alternative<Amend>(cmd.body)        ? "amend_"
                       : std::holds_alternative<ReleaseLease>(cmd.body) ? "release_"
                       : std::holds_alternative<AddPool>(cmd.body)      ? "add_pool_"
                       : std::holds_alternative<ResizePool>(cmd.body)   ? "resize_pool_"
                                                                         : nullptr;
    if (!kind) return;
    bool refused = false;
    for (const Event& e : events)
      if (const auto* r = std::get_if<CommandRejected>(&e)) add(kind + std::string(to_string(r->reason))), refused = true;
    if (!refused) add(kind + std::string("done"));
  }
  void add(const std::string& k) { ++counts[k]; }
  std::int64_t operator[](const std::string& k) const {
    auto it = counts.find(k);
    return it == counts.end() ? 0 : it->second;
  }
  // A sell's list price as an event shows it: a change is a re-pricing (an amend; green re-pricing moves only
  // the effective price).
  void note_ask_price(const Order& o) {
    auto [it, fresh] = ask_price.emplace(o.id, o.request.price);
    if (!fresh && it->second != o.request.price) ask_repriced[o.id] = true, add("cov_ask_repriced");
    it->second = o.request.price;
  }
  // What the ask and the lease a preemption takes had been through: the chain that hid session 19's bug is a
  // split-off lease whose ask was re-priced after selling it, then filled.
  void count_preemption(const Trade& t) {
    add("cov_preemption");
    auto it = leases.find(t.preempted_lease);
    if (it == leases.end()) return;
    const Lease& l = it->second;
    const bool split = l.split_from.value != 0;
    const bool repriced = t.list_price != l.list_price;
    const bool filled = ask_filled.count(t.sell_order) != 0;
    if (t.green_discount_bps > 0) add("cov_preempt_green");
    if (split) add("cov_preempt_split_lease");
    if (repriced) add("cov_preempt_ask_repriced");
    if (filled) add("cov_preempt_ask_filled");
    if (repriced && filled) add("cov_preempt_ask_repriced_filled");
    if (split && repriced && filled) add("cov_preempt_split_ask_repriced_filled");
  }
  void count(const EventSink& events) {
    for (const Event& e : events) {
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, OrderAccepted>) {
              add("accepted");
              if (v.order.is_sell()) ask_price[v.order.id] = v.order.request.price;
              if (v.order.is_buy()) bids[v.order.id] = v.order.request.constraints;
              add(std::string("accepted_") + std::string(to_string(v.order.request.time_in_force)));
              if (v.order.request.constraints.single_pool) add("accepted_single_pool");
              if (v.order.request.post_only) add("accepted_post_only");
              if (v.order.is_sell() && v.order.request.min_duration.value > 0) add("accepted_min_duration");
              if (v.order.request.min_chunk.value > 1) add("accepted_lots");
            } else if constexpr (std::is_same_v<T, OrderRejected>) {
              add("rejected_" + std::string(to_string(v.order.reason)));
              add("rejected_" + std::string(to_string(v.order.request.side)) + "_" +
                  std::string(to_string(v.order.reason)));
            } else if constexpr (std::is_same_v<T, OrderUpdated>) {
              add("updated");
              if (v.order.is_sell()) note_ask_price(v.order);
            } else if constexpr (std::is_same_v<T, OrderDone>) {
              add("done_" + std::string(to_string(v.order.status)) + "_" + std::string(to_string(v.order.reason)));
              if (v.order.is_sell()) note_ask_price(v.order);
              if (v.order.is_sell() && v.order.status == OrderStatus::filled) {
                ask_filled[v.order.id] = true;
                if (ask_repriced[v.order.id]) add("cov_ask_repriced_then_filled");
                if (ask_trades[v.order.id] >= 3) add("cov_ask_filled_by_3_or_more_trades");
              }
            } else if constexpr (std::is_same_v<T, OrderDuplicate>) {
              add("duplicate");
            } else if constexpr (std::is_same_v<T, TradeEvent>) {
              add("trade");
              if (v.trade.preemption) add("trade_preemption");
              if (v.trade.preemption) count_preemption(v.trade);
              else ++ask_trades[v.trade.sell_order];
              if (!v.trade.bucket.is_spot()) add("trade_forward");
              if (v.trade.green_discount_bps > 0) add("trade_green");
              if (v.trade.taker == Side::sell) add("trade_taker_sell");
              // Trades of bids with each kind of attribute constraint: they must really find their pools.
              auto it = bids.find(v.trade.buy_order);
              if (it != bids.end()) {
                const BidConstraints& c = it->second;
                if (!c.tiers.empty()) add("trade_constrained_tiers");
                if (!c.regions.empty()) add("trade_constrained_regions");
                if (c.nvlink) add("trade_constrained_nvlink");
                if (c.min_fabric || c.min_fabric_gbps) add("trade_constrained_fabric");
                if (c.min_sla_pct_x1000) add("trade_constrained_sla");
                if (c.green_only) add("trade_constrained_green_only");
                if (c.max_pue_x1000 || c.min_renewable_pct_x100 || c.max_carbon_g_per_kwh_x100)
                  add("trade_constrained_energy_limits");
                if (c.single_pool) add("trade_constrained_single_pool");
              }
            } else if constexpr (std::is_same_v<T, LeaseChanged>) {
              add("lease_" + std::string(to_string(v.lease.status)));
              if (v.lease.split_from) add("lease_split");
              // A split-off lease whose ask's list price differs from its own: the rare entry session 19 lost.
              if (v.lease.split_from && !leases.count(v.lease.id) && v.lease.ask_list_price != v.lease.list_price)
                add("cov_split_ask_price_apart");
              leases[v.lease.id] = v.lease;
            } else if constexpr (std::is_same_v<T, LeasePreempted>) {
              add("preempted");
            } else if constexpr (std::is_same_v<T, BookDelta>) {
              add("book_delta");
            } else if constexpr (std::is_same_v<T, PoolChanged>) {
              add("pool_changed");
            } else if constexpr (std::is_same_v<T, MarketHaltChanged>) {
              add("halt_changed");
            } else if constexpr (std::is_same_v<T, LimitsChanged>) {
              add("limits_changed");
            } else if constexpr (std::is_same_v<T, GreenPolicyChanged>) {
              add("policy_changed");
            } else if constexpr (std::is_same_v<T, CommandRejected>) {
              add("command_rejected_" + std::string(to_string(v.reason)));
            }
          },
          e);
    }
  }
};

// The invariants of DESIGN.md §4, checked on the engine's state after every command. Returns "" or a failure.
std::string check_invariants(const Engine& engine, const ReferenceMatcher& ref) {
  std::ostringstream fail;
  const EngineState s = engine.snapshot();
  for (const Order& o : s.open_orders) {
    // "A bid counts GPUs: always filled + remaining = quantity."
    if (o.is_buy() && o.filled + o.remaining != o.request.quantity)
      fail << "bid " << o.id.value << ": filled + remaining != quantity\n";
    // "filled + lapsed + free GPU-hours = quantity x clipped window hours" (+ cancelled)
    if (o.is_sell() && o.filled_gpu_seconds + o.lapsed_gpu_seconds + o.free_gpu_seconds + o.cancelled_gpu_seconds !=
                           o.total_gpu_seconds)
      fail << "ask " << o.id.value << ": GPU-hour accounting broken\n";
  }
  // "no pool is ever oversold": leases plus open asks' free capacity fit in the pool's GPUs at every instant.
  const Seconds now = engine.now();
  const Seconds horizon = now + Seconds(400 * 86400);
  for (const Pool& p : s.pools) {
    const auto cap = engine.pool_capacity(p.id, now, horizon);
    if (!cap) {
      fail << "pool " << p.id.value << ": no capacity answer\n";
      continue;
    }
    if (cap->unallocated.min(now, horizon) < 0) fail << "pool " << p.id.value << ": oversold (engine's view)\n";
    std::vector<Seconds> ts{now};
    for (const Steps* st : {&cap->leased, &cap->offered})
      for (const Step& piece : st->pieces()) {
        if (piece.from > now && piece.from < horizon) ts.push_back(piece.from);
      }
    for (Seconds t : ts) {
      if (cap->leased.at(t) + cap->offered.at(t) > p.gpus().value)
        fail << "pool " << p.id.value << ": leased + offered > gpus at " << t.value << "\n";
      if (ref.committed_at(p.id, t) > p.gpus().value)
        fail << "pool " << p.id.value << ": oversold at " << t.value << " (reference's view)\n";
      if (ref.committed_at(p.id, t) != cap->leased.at(t) + cap->offered.at(t))
        fail << "pool " << p.id.value << ": engine commits " << cap->leased.at(t) + cap->offered.at(t)
             << " GPUs at " << t.value << ", reference " << ref.committed_at(p.id, t) << "\n";
    }
  }
  // "after every command no resting bid and ask are mutually eligible and crossed" (halted markets don't match).
  for (const Order& b : s.open_orders) {
    if (!b.is_buy()) continue;
    if (std::find(s.halted_markets.begin(), s.halted_markets.end(), b.market) != s.halted_markets.end()) continue;
    for (const Order& a : s.open_orders)
      if (a.is_sell() && ref.eligible(b, a) && b.request.price >= a.effective_price)
        fail << "bid " << b.id.value << " and ask " << a.id.value << " rest eligible and crossed\n";
  }
  // The engine's order and lease queries agree with the reference (the fields time does not move).
  for (const Order& o : ref.orders()) {
    const Order* e = engine.order(o.id);
    if (o.is_open() != (e != nullptr)) {
      fail << "order " << o.id.value << ": engine.order() " << (e ? "has" : "lacks") << " it\n";
      continue;
    }
    if (!e) continue;
    if (e->status != o.status || e->filled != o.filled || e->remaining != o.remaining ||
        e->effective_price != o.effective_price || e->priority != o.priority || e->request.price != o.request.price ||
        e->request.quantity != o.request.quantity || e->filled_gpu_seconds != o.filled_gpu_seconds ||
        e->cancelled_gpu_seconds != o.cancelled_gpu_seconds || segments_of(e->free) != ref.free_pieces(o.id))
      fail << "order " << o.id.value << ": engine.order() differs from the reference\n  " << to_string(*e) << "\n  "
           << to_string(o) << " free " << dump_segments(ref.free_pieces(o.id)) << "\n";
  }
  for (const Lease& l : ref.leases()) {
    const Lease* e = engine.lease(l.id);
    if (l.ended != (e == nullptr)) {
      fail << "lease " << l.id.value << ": engine.lease() " << (e ? "has" : "lacks") << " it\n";
      continue;
    }
    if (e && !(*e == l))
      fail << "lease " << l.id.value << ": engine.lease() differs\n  " << to_string(*e) << "\n  " << to_string(l) << "\n";
  }
  // The engine's book queries equal the reference's views.
  for (const MarketSpec& m : RandomCommands::config().markets) {
    std::vector<Bucket> buckets{Bucket::spot()};
    for (const Order& o : ref.orders()) buckets.push_back(o.bucket);
    std::sort(buckets.begin(), buckets.end());
    buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
    for (Bucket b : buckets) {
      const Depth d = engine.depth(m.id, b, 1000);
      const Depth r = ref.depth(m.id, b);
      if (!(d == r)) fail << "depth of " << m.id.value() << " " << to_string(b) << " differs from the reference\n";
    }
  }
  return fail.str();
}

}  // namespace

TEST_CASE("the engine and the reference matcher produce identical events", "[differential]") {
  std::uint64_t first = kDefaultSeed;
  int sequences = kSequences;
  if (const char* env = std::getenv("GPUEX_SEED")) {
    first = std::strtoull(env, nullptr, 10);
    sequences = 1;
  }
  if (const char* env = std::getenv("GPUEX_SEQUENCES")) sequences = std::atoi(env);  // longer soak runs
  int length = kCommandsPerSequence;
  if (const char* env = std::getenv("GPUEX_COMMANDS")) length = std::atoi(env);
  const bool stats = std::getenv("GPUEX_DIFF_STATS") != nullptr;
  // Triage of a soak run: look past the known engine bug (see "a lease made by a preemption stays tied ...").
  const bool known_bugs = std::getenv("GPUEX_KNOWN_BUGS") != nullptr;
  // After the plain sequences, half as many (at least twelve: about two in five of them reach a preemption of a
  // split-off lease whose ask was re-priced and filled, since the lifecycles' twists share their steps) from the
  // same seeds that play spot-lease lifecycles (RandomCommands::play_lifecycles); GPUEX_LIFECYCLES=0 or 1 runs
  // only the plain or only those ones.
  const char* lifecycle_env = std::getenv("GPUEX_LIFECYCLES");
  const int plain = lifecycle_env && std::string(lifecycle_env) == "1" ? 0 : sequences;
  const int lifecycle = lifecycle_env && std::string(lifecycle_env) == "0" ? 0
                        : plain == 0                                      ? sequences
                                                                          : std::max(12, sequences / 2);
  const EngineConfig config = RandomCommands::config();
  Mix mix;        // of the plain sequences: the mix checked below is theirs, as before lifecycles were played
  Mix lifecycles;  // of the lifecycle sequences
  int failed = 0;
  std::int64_t commands = 0;
  std::int64_t plain_commands = 0;
  std::int64_t lifecycle_steps = 0;
  for (int i = 0; i < plain + lifecycle; ++i) {
    const bool life = i >= plain;
    const std::uint64_t seed = first + static_cast<std::uint64_t>(life ? i - plain : i);
    Mix& m = life ? lifecycles : mix;
    Engine engine(config);
    ReferenceMatcher ref(config);
    ref.mimic_unlinked_preemption_leases(known_bugs);
    RandomCommands gen(seed, kStart);
    if (life) gen.play_lifecycles();
    m.new_sequence();
    std::vector<std::string> log;
    for (int k = 0; k < length; ++k) {
      const Command cmd = gen.next();
      log.push_back(describe(cmd));
      EventSink fast;
      EventSink slow;
      std::string error;
      try {
        engine.apply(cmd, fast);
      } catch (const std::exception& e) {
        error = std::string("engine threw: ") + e.what();
      }
      ref.apply(cmd, slow);
      drop_body_hashes(fast);
      std::string broken = take_free(fast, ref);
      ++commands;
      (life ? lifecycle_steps : plain_commands) += life ? gen.last_was_lifecycle() : 1;
      m.count_reach(cmd, slow, ref);
      m.count(slow);
      m.count_refusal(cmd, slow);
      if (error.empty() && fast == slow && broken.empty()) broken = check_invariants(engine, ref);
      if (!error.empty() || fast != slow || !broken.empty()) {
        ++failed;
        if (failed <= 3) {
          std::ostringstream s;
          s << "MISMATCH seed=" << seed << (life ? " playing lifecycles" : "") << " (replay: GPUEX_SEED=" << seed
            << " GPUEX_LIFECYCLES=" << life << ") command index " << k << "\n";
          s << "  commands so far:\n";
          for (const std::string& line : log) s << "    " << line << "\n";
          if (!error.empty()) s << "  " << error << "\n";
          if (!broken.empty()) s << "  invariants:\n" << broken;
          if (fast != slow) {
            s << "  engine events:\n" << dump_events(fast) << "  reference events:\n" << dump_events(slow);
            for (std::size_t j = 0; j < std::max(fast.size(), slow.size()); ++j) {
              if (j < fast.size() && j < slow.size() && fast[j] == slow[j]) continue;
              s << "  first difference at event " << j << "\n";
              break;
            }
          }
          std::cerr << s.str() << std::endl;
        } else if (std::getenv("GPUEX_DIFF_SUMMARY")) {
          std::size_t j = 0;
          while (j < fast.size() && j < slow.size() && fast[j] == slow[j]) ++j;
          std::cerr << "MISMATCH seed=" << seed << (life ? " playing lifecycles" : "") << " index " << k << ": "
                    << log.back() << "\n  " << error << broken
                    << "  E: " << (j < fast.size() ? to_string(fast[j]) : "-") << "\n  R: "
                    << (j < slow.size() ? to_string(slow[j]) : "-") << "\n";
        }
        break;
      }
      gen.observe(slow);
      // snapshot() / restore() round-trips with an equal digest; from the middle on, every fourth sequence goes
      // on with the restored engine (as after a restart, with everything so far committed).
      // (Chosen by seed, so that a replay of one sequence with GPUEX_SEED restores where the whole run did.)
      // A lifecycle also asks for a restart now and then, in the middle of its preemptions and notices.
      const bool mid_lifecycle = life && gen.restore_after_last();
      if (((k == 40 || k == length - 1) && seed % 4 == kDefaultSeed % 4 || mid_lifecycle) && !known_bugs) {
        if (mid_lifecycle) m.restored = true, m.add("cov_restored_mid_lifecycle");
        engine.committed_through(cmd.seq);
        ref.committed_through(cmd.seq);
        const EngineState state = engine.snapshot();
        Engine restored = Engine::restore(config, state);
        CHECK(restored.digest() == engine.digest());
        CHECK(restored.snapshot() == state);
        engine = std::move(restored);
      }
    }
  }
  // What a reader (and the checks below) can see the spot-lease lifecycle reached, once per run.
  const auto coverage = [](const Mix& x) {
    std::ostringstream s;
    s << "preemptions " << x["cov_preemption"] << " (of split-off leases " << x["cov_preempt_split_lease"]
      << "; of leases whose ask was re-priced since " << x["cov_preempt_ask_repriced"] << ", filled "
      << x["cov_preempt_ask_filled"] << ", both " << x["cov_preempt_ask_repriced_filled"]
      << "; split-off and both " << x["cov_preempt_split_ask_repriced_filled"]
      << "; on a green-discounted pool " << x["cov_preempt_green"]
      << "), split-off leases with their ask's list price apart " << x["cov_split_ask_price_apart"]
      << ", asks re-priced " << x["cov_ask_repriced"] << " (then filled " << x["cov_ask_repriced_then_filled"]
      << "), asks filled by 3+ trades " << x["cov_ask_filled_by_3_or_more_trades"] << ", leases released "
      << x["lease_released"] << ", completed " << x["lease_completed"];
    // What the rest of the market did to preemptible capacity (the lifecycles' twists).
    s << "; preemptions taking several leases " << x["cov_preempt_several_leases"] << " (across asks "
      << x["cov_preempt_across_asks"] << "), by an amend " << x["cov_preempt_by_amend"] << ", fok "
      << x["cov_preempt_fok"] << ", forward " << x["cov_preempt_forward"] << ", after a mid-lifecycle restore "
      << x["cov_preempt_after_restore"] << " (restores " << x["cov_restored_mid_lifecycle"]
      << "), at a discount moved since the lease " << x["cov_preempt_discount_moved"]
      << ", by a bidder holding a lease there " << x["cov_preempt_bidder_holds_lease"]
      << "; second asks of a pool sold " << x["cov_pool_second_ask_sold"] << ", forward trades on spot pools "
      << x["cov_forward_trade_spot_pool"] << ", STP on interruptible bids " << x["cov_stp_interruptible_bid"]
      << ", post_only bids resting over preemptible leases " << x["cov_post_only_rests_over_preemptible"]
      << ", exposure_limit with live leases " << x["cov_exposure_limit_with_leases"] << ", market_halted "
      << x["rejected_market_halted"] + x["amend_market_halted"] << ", leased asks cancelled "
      << x["cov_cancel_leased_ask"] << ", amended " << x["cov_amend_leased_ask"] << ", re-priced by a policy "
      << x["cov_policy_repriced_leased_ask"] << ", interruptible bids cut " << x["cov_amend_interruptible_bid_quantity"]
      << ", pools with live leases resized " << x["cov_resize_done_with_live_leases"] << " (refused "
      << x["cov_resize_refused_with_live_leases"] << "), retirements refused "
      << x["cov_retire_refused_with_live_leases"] << ", retired after leases " << x["cov_retire_after_leases"];
    return s.str();
  };
  std::cout << "differential coverage: " << plain << " plain sequences (" << plain_commands << " commands): "
            << coverage(mix) << "\n  " << lifecycle << " sequences playing lifecycles ("
            << commands - plain_commands << " commands, " << lifecycle_steps << " of them lifecycle steps): "
            << coverage(lifecycles) << std::endl;
  if (stats) {
    std::cout << "differential: " << commands << " commands, " << sequences << " sequences from seed " << first << "\n";
    for (const auto& [k, v] : mix.counts) std::cout << "  " << k << " " << v << "\n";
    std::cout << "lifecycle sequences:\n";
    for (const auto& [k, v] : lifecycles.counts) std::cout << "  " << k << " " << v << "\n";
  }
  INFO("sequences with a mismatch: " << failed << " of " << plain + lifecycle);
  CHECK(failed == 0);
  // The mix must stay rich, or the comparison proves little (checked on the default run, per 20,000 commands
  // of the plain sequences; the lifecycle ones after).
  if (sequences == kSequences && length == kCommandsPerSequence && !std::getenv("GPUEX_SEED") && !lifecycle_env) {
    const std::int64_t per20k = plain_commands / 20000;
    CHECK(mix["trade"] > 1000 * per20k);
    CHECK(mix["trade_preemption"] > 20 * per20k);
    CHECK(mix["lease_split"] > 10 * per20k);
    CHECK(mix["trade_forward"] > 200 * per20k);
    CHECK(mix["trade_green"] > 100 * per20k);
    CHECK(mix["trade_taker_sell"] > 200 * per20k);
    CHECK(mix["accepted_fok"] > 200 * per20k);
    CHECK(mix["accepted_ioc"] > 200 * per20k);
    CHECK(mix["accepted_gtd"] > 200 * per20k);
    CHECK(mix["accepted_single_pool"] > 50 * per20k);
    CHECK(mix["accepted_post_only"] > 50 * per20k);
    CHECK(mix["accepted_min_duration"] > 100 * per20k);
    CHECK(mix["accepted_lots"] > 100 * per20k);
    CHECK(mix["done_rejected_self_trade"] + mix["done_cancelled_self_trade"] > 50 * per20k);
    CHECK(mix["done_rejected_would_take"] > 20 * per20k);
    CHECK(mix["done_expired_expired"] > 500 * per20k);
    CHECK(mix["duplicate"] > 100 * per20k);
    CHECK(mix["command_rejected_idempotency_conflict"] > 100 * per20k);
    CHECK(mix["rejected_exposure_limit"] > 30 * per20k);
    CHECK(mix["rejected_insufficient_pool_capacity"] > 100 * per20k);
    CHECK(mix["rejected_market_halted"] > 50 * per20k);
    CHECK(mix["rejected_off_tick"] > 20 * per20k);
    CHECK(mix["rejected_quantity_not_multiple_of_chunk"] > 20 * per20k);
    CHECK(mix["rejected_window_in_past"] > 20 * per20k);
    CHECK(mix["command_rejected_pool_busy"] > 20 * per20k);
    CHECK(mix["command_rejected_invalid_amend"] > 10 * per20k);
    CHECK(mix["lease_completed"] > 300 * per20k);
    CHECK(mix["lease_released"] > 50 * per20k);
    CHECK(mix["lease_preempted"] > 20 * per20k);
    CHECK(mix["policy_changed"] > 50 * per20k);
    // Orders refused before the market is looked at (random_commands.cpp place_invalid), both sides.
    CHECK(mix["rejected_buy_invalid_field"] > 50 * per20k);
    CHECK(mix["rejected_sell_invalid_field"] > 30 * per20k);
    CHECK(mix["rejected_buy_not_found"] > 5 * per20k);   // an unknown market
    CHECK(mix["rejected_sell_not_found"] > 15 * per20k);  // an unknown, someone else's or a retired pool
    // Commands on orders and leases that are not one's own (or not open any more), and amends that break a rule.
    CHECK(mix["cancel_not_found"] > 30 * per20k);
    CHECK(mix["amend_not_found"] > 30 * per20k);
    CHECK(mix["release_not_found"] > 10 * per20k);
    CHECK(mix["amend_invalid_amend"] > 10 * per20k);
    CHECK(mix["amend_off_tick"] > 2 * per20k);
    CHECK(mix["amend_quantity_not_multiple_of_chunk"] > 2 * per20k);
    CHECK(mix["amend_exposure_limit"] > 2 * per20k);
    CHECK(mix["amend_would_take"] > 2 * per20k);
    CHECK(mix["add_pool_invalid_field"] > 2 * per20k);
    CHECK(mix["add_pool_not_found"] > 1 * per20k);
    CHECK(mix["resize_pool_invalid_field"] > 1 * per20k);
    CHECK(mix["resize_pool_not_found"] > 5 * per20k);
    // Trades of bids with each kind of attribute constraint.
    CHECK(mix["trade_constrained_tiers"] > 30 * per20k);
    CHECK(mix["trade_constrained_regions"] > 30 * per20k);
    CHECK(mix["trade_constrained_nvlink"] > 20 * per20k);
    CHECK(mix["trade_constrained_fabric"] > 30 * per20k);
    CHECK(mix["trade_constrained_sla"] > 15 * per20k);
    CHECK(mix["trade_constrained_green_only"] > 10 * per20k);
    CHECK(mix["trade_constrained_energy_limits"] > 10 * per20k);
    CHECK(mix["trade_constrained_single_pool"] > 20 * per20k);
    // The lifecycle sequences reach the chain that hid session 19's bug (a lease split off by a preemption lost
    // the list price of its ask, re-priced and then filled) and the steps around it, a third of what they reach
    // now: 1,161 preemptions, 305 of split-off leases, 347 of leases whose ask was re-priced and then filled,
    // 157 of split-off ones, 179 on a green-discounted pool, per 37,500 commands.
    const std::int64_t life20k = (commands - plain_commands) / 20000;
    CHECK(life20k >= 1);
    CHECK(lifecycles["cov_preemption"] > 300 * life20k);
    CHECK(lifecycles["cov_preempt_split_lease"] > 100 * life20k);
    CHECK(lifecycles["cov_preempt_ask_repriced_filled"] > 100 * life20k);
    CHECK(lifecycles["cov_preempt_split_ask_repriced_filled"] > 50 * life20k);
    CHECK(lifecycles["cov_split_ask_price_apart"] > 50 * life20k);
    CHECK(lifecycles["cov_preempt_green"] > 50 * life20k);
    CHECK(lifecycles["cov_ask_repriced_then_filled"] > 80 * life20k);
    CHECK(lifecycles["cov_ask_filled_by_3_or_more_trades"] > 50 * life20k);
    CHECK(lifecycles["lease_released"] > 200 * life20k);
    CHECK(lifecycles["lease_completed"] > 1000 * life20k);
    // What the rest of the market does to preemptible capacity (the lifecycles' twists, random_commands.hpp), a
    // third of what the 37,500 lifecycle commands reach now: 122 preemptions taking several leases (28 across
    // asks of one pool), 28 by an amend, 163 fok, 245 forward, 845 after 614 restores in the middle of a
    // lifecycle, 44 at a discount moved since the lease, 650 by a bidder holding a lease there; 1,014 second asks
    // of a pool sold, 608 forward trades on spot pools, 193 self-trade stops of interruptible bids, 30 post_only
    // bids resting over preemptible leases, 238 exposure_limit refusals of accounts with live leases, 1,079
    // market_halted, 248 / 766 / 54 asks with live leases cancelled / amended / re-priced by a policy, 287
    // interruptible bids cut, 156 / 65 resizes of pools with live leases done / refused, 90 retirements
    // refused, 237 pools retired after their leases.
    CHECK(lifecycles["cov_preempt_several_leases"] > 40 * life20k);
    CHECK(lifecycles["cov_preempt_across_asks"] > 9 * life20k);
    CHECK(lifecycles["cov_preempt_by_amend"] > 9 * life20k);
    CHECK(lifecycles["cov_preempt_fok"] > 50 * life20k);
    CHECK(lifecycles["cov_preempt_forward"] > 80 * life20k);
    CHECK(lifecycles["cov_restored_mid_lifecycle"] > 200 * life20k);
    CHECK(lifecycles["cov_preempt_after_restore"] > 250 * life20k);
    CHECK(lifecycles["cov_preempt_discount_moved"] > 14 * life20k);
    CHECK(lifecycles["cov_preempt_bidder_holds_lease"] > 200 * life20k);
    CHECK(lifecycles["cov_pool_second_ask_sold"] > 300 * life20k);
    CHECK(lifecycles["cov_forward_trade_spot_pool"] > 200 * life20k);
    CHECK(lifecycles["cov_stp_interruptible_bid"] > 60 * life20k);
    CHECK(lifecycles["cov_post_only_rests_over_preemptible"] > 10 * life20k);
    CHECK(lifecycles["cov_exposure_limit_with_leases"] > 80 * life20k);
    CHECK(lifecycles["rejected_market_halted"] + lifecycles["amend_market_halted"] > 300 * life20k);
    CHECK(lifecycles["cov_cancel_leased_ask"] > 80 * life20k);
    CHECK(lifecycles["cov_amend_leased_ask"] > 250 * life20k);
    CHECK(lifecycles["cov_policy_repriced_leased_ask"] > 18 * life20k);
    CHECK(lifecycles["cov_amend_interruptible_bid_quantity"] > 90 * life20k);
    CHECK(lifecycles["cov_resize_done_with_live_leases"] > 50 * life20k);
    CHECK(lifecycles["cov_resize_refused_with_live_leases"] > 20 * life20k);
    CHECK(lifecycles["cov_retire_refused_with_live_leases"] > 30 * life20k);
    CHECK(lifecycles["cov_retire_after_leases"] > 80 * life20k);
  }
}

namespace {

// Runs a script through an engine that runs on and one restored from its snapshot after `cut` commands; returns
// "" when both answer every later command alike, else where and how they differ.
std::string restore_divergence(const std::vector<Command>& script, std::size_t cut) {
  const EngineConfig config = RandomCommands::config();
  Engine original(config);
  for (std::size_t i = 0; i < cut; ++i) {
    EventSink ignored;
    original.apply(script[i], ignored);
  }
  original.committed_through(script[cut - 1].seq);
  Engine restored = Engine::restore(config, original.snapshot());
  for (std::size_t i = cut; i < script.size(); ++i) {
    EventSink a;
    EventSink b;
    original.apply(script[i], a);
    restored.apply(script[i], b);
    if (a != b)
      return "command " + describe(script[i]) + "\n  original:\n" + dump_events(a) + "  restored:\n" + dump_events(b);
  }
  return "";
}

}  // namespace

namespace {

// Runs a script through the engine and the reference; returns "" when they agree on every command.
std::string reference_divergence(const std::vector<Command>& script) {
  const EngineConfig config = RandomCommands::config();
  Engine engine(config);
  ReferenceMatcher ref(config);
  for (const Command& c : script) {
    EventSink a;
    EventSink b;
    engine.apply(c, a);
    ref.apply(c, b);
    drop_body_hashes(a);
    const std::string free = take_free(a, ref);
    if (!free.empty()) return "command " + describe(c) + "\n  free capacity differs:\n" + free;
    if (a != b) return "command " + describe(c) + "\n  engine:\n" + dump_events(a) + "  reference:\n" + dump_events(b);
  }
  return "";
}

}  // namespace

// Found by the randomized run (GPUEX_SEED=3000011): the lease a preemption creates records the ask that sold the
// GPUs (sell_order, ask window, list price), but the running engine does not tie it to that ask: when the ask is
// cancelled the lease keeps ask_withdrawn = false and can still be preempted, although DESIGN.md §4 allows
// preemption only of leases whose ask is "open or filled, not cancelled". An engine restored from a snapshot
// ties them (from sell_order), so it behaves differently from the engine that ran on (DESIGN.md §2).
TEST_CASE("a lease made by a preemption stays tied to the ask that sold the GPUs", "[differential][restore]") {
  const std::int64_t t0 = kStart;
  PoolSpec spot;
  spot.market = MarketId{"H100"};
  spot.region = "US";
  spot.tier = Tier::spot;
  spot.gpus_per_node = 4;
  spot.nodes = 1;
  OrderRequest ask;
  ask.side = Side::sell;
  ask.pool = PoolId(1);
  ask.price = Price(1'500'000);
  ask.quantity = Qty(4);
  ask.start = Seconds(t0);
  ask.end = Seconds(t0 + 10 * 86400);
  OrderRequest bid;
  bid.side = Side::buy;
  bid.market = MarketId{"H100"};
  bid.quantity = Qty(4);
  bid.constraints.interruptible = true;
  bid.time_in_force = TimeInForce::ioc;
  OrderRequest first = bid;  // lease 1: all 4 GPUs for 6 h at 1.50
  first.price = Price(1'500'000);
  first.duration = Seconds(6 * 3600);
  OrderRequest second = bid;  // preempts lease 1: lease 2 for 1 h from t0 + 180 at 1.5001
  second.price = Price(2'000'000);
  second.duration = Seconds(3600);
  OrderRequest third = bid;  // would preempt lease 2, but the ask that sold it is cancelled by then
  third.price = Price(2'500'000);
  third.duration = Seconds(1800);
  const std::vector<Command> script{
      Command{1, Seconds(t0), AccountId(2), AddPool{spot}},
      Command{2, Seconds(t0), AccountId(2), PlaceOrder{ask}},
      Command{3, Seconds(t0), AccountId(10), PlaceOrder{first}},
      Command{4, Seconds(t0 + 60), AccountId(11), PlaceOrder{second}},
      Command{5, Seconds(t0 + 120), AccountId(2), Cancel{OrderId(2)}},
      Command{6, Seconds(t0 + 130), AccountId(10), PlaceOrder{third}},
      Command{7, Seconds(t0 + 5 * 3600), AccountId(99), Tick{}},
  };
  const std::string vs_reference = reference_divergence(script);
  INFO(vs_reference);
  CHECK(vs_reference.empty());
  const std::string vs_restored = restore_divergence(script, 4);  // restored after the preemption
  INFO(vs_restored);
  CHECK(vs_restored.empty());
}

// Found by the lifecycles' green policy twists (GPUEX_SEED=1703 GPUEX_LIFECYCLES=1, shrunk to these commands): a
// policy that moves a verified pool's discount by a bp re-prices its open asks (DESIGN.md §4 "Green discount"),
// and the ask's OrderUpdated announces its new discount although 1.70 x 0.8501 rounds down to the same 0.001 tick
// of L40S as 1.70 x 0.85. The reference changed the ask's discount without an event.
TEST_CASE("a discount moved by a bp re-prices an ask whose effective price stays", "[differential]") {
  const std::int64_t t0 = kStart;
  PoolSpec spec;
  spec.market = MarketId{"L40S"};
  spec.region = "FR";
  spec.tier = Tier::spot;
  spec.gpus_per_node = 4;
  spec.nodes = 2;
  spec.energy = EnergyAttributes{1250, 6000, 30000};  // green
  OrderRequest ask;
  ask.side = Side::sell;
  ask.pool = PoolId(1);
  ask.price = Price(1'700'000);
  ask.quantity = Qty(4);
  ask.start = Seconds(t0);
  ask.end = Seconds(t0 + 3 * 86400);
  GreenPolicy policy = GreenPolicy::defaults();
  policy.rules[1].discount_bps = 1499;
  const std::vector<Command> script{
      Command{1, Seconds(t0), AccountId(2), AddPool{spec}},
      Command{2, Seconds(t0), AccountId(2), PlaceOrder{ask}},
      Command{3, Seconds(t0 + 300), AccountId(99), VerifyPool{PoolId(1), true, Seconds(t0 + 86400), "audit"}},
      Command{4, Seconds(t0 + 700), AccountId(99), SetGreenPolicy{policy}},
  };
  const std::string vs_reference = reference_divergence(script);
  INFO(vs_reference);
  CHECK(vs_reference.empty());
}

// GPUEX_LIFECYCLES=1 plays lifecycles; GPUEX_SEQUENCES=n tries n seeds from GPUEX_SEED on (a restore soak).
TEST_CASE("debug: restore divergence of one random sequence", "[.debug]") {
  const std::uint64_t first = std::strtoull(std::getenv("GPUEX_SEED") ? std::getenv("GPUEX_SEED") : "3000011", nullptr, 10);
  const int sequences = std::getenv("GPUEX_SEQUENCES") ? std::atoi(std::getenv("GPUEX_SEQUENCES")) : 1;
  const bool lifecycles = std::getenv("GPUEX_LIFECYCLES") && std::string(std::getenv("GPUEX_LIFECYCLES")) == "1";
  const EngineConfig config = RandomCommands::config();
  int differ = 0;
  for (std::uint64_t seed = first; seed < first + static_cast<std::uint64_t>(sequences); ++seed) {
    Engine a(config);
    RandomCommands gen(seed, kStart);
    if (lifecycles) gen.play_lifecycles();
    std::vector<Command> log;
    for (int k = 0; k < 150; ++k) {
      log.push_back(gen.next());
      EventSink ev;
      a.apply(log.back(), ev);
      gen.observe(ev);
    }
    const std::size_t first_cut = std::getenv("GPUEX_CUT") ? std::strtoull(std::getenv("GPUEX_CUT"), nullptr, 10) : 1;
    for (std::size_t cut = first_cut; cut < log.size(); ++cut) {
      const std::string d = restore_divergence(log, cut);
      if (!d.empty()) {
        std::cout << "seed " << seed << " cut " << cut << ": " << d << "\n";
        ++differ;
        break;
      }
    }
  }
  std::cout << "restore divergence: " << differ << " of " << sequences << " sequences\n";
}

// Exposure limits on an amend (DESIGN.md §4: "An order that would exceed one is rejected"): an amend that raises
// the account's open notional past its limit is refused; one that lowers it is not, even with a higher price and
// even while the account is over a limit lowered since. Engine and reference must agree on both.
TEST_CASE("an amend is refused for exposure only when it raises the open notional past the limit", "[differential]") {
  const std::int64_t t0 = kStart;
  OrderRequest bid;
  bid.side = Side::buy;
  bid.market = MarketId{"H100"};
  bid.price = Price(2'000'000);
  bid.quantity = Qty(8);
  bid.duration = Seconds(3600);  // notional 8 x 2.00 x 1 h = 16 USD
  Limits tight;
  tight.max_open_notional = 10'000'000;  // USD 10: the account is now over it
  Amend up_and_down{OrderId(2), Qty(4), Price(2'600'000)};  // 4 x 2.60 = 10.40 USD: lower, still over the limit
  Amend up{OrderId(2), std::nullopt, Price(2'100'000)};      // 8 x 2.10 = 16.80 USD: higher, over the limit
  const std::vector<Command> script{
      Command{1, Seconds(t0), AccountId(99), SetLimits{AccountId(10), Limits{}}},
      Command{2, Seconds(t0), AccountId(10), PlaceOrder{bid}},
      Command{3, Seconds(t0), AccountId(99), SetLimits{AccountId(10), tight}},
      Command{4, Seconds(t0), AccountId(10), up},
      Command{5, Seconds(t0), AccountId(10), up_and_down},
  };
  const std::string vs_reference = reference_divergence(script);
  INFO(vs_reference);
  CHECK(vs_reference.empty());
  Engine engine(RandomCommands::config());
  EventSink events;
  for (const Command& c : script) {
    events.clear();
    engine.apply(c, events);
    if (c.seq == 4) {
      REQUIRE(!events.empty());
      const auto* r = std::get_if<CommandRejected>(&events.front());
      REQUIRE(r != nullptr);
      CHECK(r->reason == Reason::exposure_limit);
    }
  }
  REQUIRE(!events.empty());
  const auto* updated = std::get_if<OrderUpdated>(&events.front());
  REQUIRE(updated != nullptr);
  CHECK(updated->order.request.quantity == Qty(4));
  CHECK(updated->order.request.price == Price(2'600'000));
}

// Shrinks one random sequence (GPUEX_SEED) that the engine and the reference disagree on, without restores,
// to a short script that still disagrees: commands are dropped one at a time while the disagreement stays.
TEST_CASE("debug: shrink a sequence where the engine and the reference differ", "[.shrink]") {
  const std::uint64_t seed = std::strtoull(std::getenv("GPUEX_SEED") ? std::getenv("GPUEX_SEED") : "20270101", nullptr, 10);
  const EngineConfig config = RandomCommands::config();
  ReferenceMatcher ref(config);
  RandomCommands gen(seed, kStart);
  if (std::getenv("GPUEX_LIFECYCLES") && std::string(std::getenv("GPUEX_LIFECYCLES")) == "1") gen.play_lifecycles();
  const int length = std::getenv("GPUEX_COMMANDS") ? std::atoi(std::getenv("GPUEX_COMMANDS")) : kCommandsPerSequence;
  std::vector<Command> log;
  for (int k = 0; k < length; ++k) {
    log.push_back(gen.next());
    EventSink ev;
    ref.apply(log.back(), ev);
    gen.observe(ev);
    if (!reference_divergence(log).empty()) break;
  }
  if (reference_divergence(log).empty()) {  // then where an engine restored from a snapshot differs, if anywhere
    for (std::size_t cut = 1; cut < log.size(); ++cut) {
      const std::string d = restore_divergence(log, cut);
      if (d.empty()) continue;
      std::cout << "the reference agrees; restored after " << cut << " commands: " << d << "\n";
      break;
    }
    return;
  }
  for (bool shrunk = true; shrunk;) {
    shrunk = false;
    for (std::size_t i = log.size() - 1; i-- > 0;) {
      std::vector<Command> shorter = log;
      shorter.erase(shorter.begin() + static_cast<std::ptrdiff_t>(i));
      if (!reference_divergence(shorter).empty()) log = std::move(shorter), shrunk = true;
    }
  }
  for (const Command& c : log) std::cout << describe(c) << "\n";
  std::cout << reference_divergence(log) << "\n";
  {
    Engine e(config);
    for (const Command& c : log) {
      EventSink ev;
      e.apply(c, ev);
      std::cout << "after seq " << c.seq << ": engine invariants " << e.check_invariants() << "\n";
    }
  }
  for (std::size_t cut = 1; cut < log.size(); ++cut)
    std::cout << "restored after " << cut << " commands: "
              << (restore_divergence(log, cut).empty() ? "alike" : "differs") << "\n";
}
