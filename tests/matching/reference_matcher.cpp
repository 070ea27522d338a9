// The reference matcher: every rule of DESIGN.md §4 written out plainly over vectors of all orders, pools
// and leases. Every match scans everything; book views are recomputed from scratch after each command and
// diffed against the previous ones. Clarity over speed: it only has to be obviously right.
#include "reference_matcher.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "reference_rules.hpp"

namespace gpuex::matching::test {

namespace {

std::int64_t lcm64(std::int64_t a, std::int64_t b) { return std::lcm(std::max<std::int64_t>(a, 1), std::max<std::int64_t>(b, 1)); }

// "Bids with attribute constraints (regions, tiers, nvlink, min_fabric, min_fabric_gbps, min_sla_pct, the energy
// constraints, single_pool; not interruptible or min_chunk) are not in the levels."
bool constrained_bid(const Order& o) {
  const BidConstraints& c = o.request.constraints;
  return !c.tiers.empty() || !c.regions.empty() || c.nvlink || c.min_fabric.has_value() ||
         c.min_fabric_gbps.has_value() || c.min_sla_pct_x1000.has_value() || c.green_only ||
         c.max_pue_x1000.has_value() || c.min_renewable_pct_x100.has_value() ||
         c.max_carbon_g_per_kwh_x100.has_value() || c.single_pool;
}

Seconds bid_length(const Order& b) {
  return b.request.duration ? *b.request.duration : *b.request.end - *b.request.start;
}

}  // namespace

ReferenceMatcher::ReferenceMatcher(EngineConfig config) : config_(std::move(config)), policy_(config_.policy) {}

// ---------------------------------------------------------------------------------------------- lookups

Pool* ReferenceMatcher::pool(PoolId id) {
  for (Pool& p : pools_)
    if (p.id == id) return &p;
  return nullptr;
}
const Pool* ReferenceMatcher::pool(PoolId id) const {
  for (const Pool& p : pools_)
    if (p.id == id) return &p;
  return nullptr;
}
Order* ReferenceMatcher::order(OrderId id) {
  for (Order& o : orders_)
    if (o.id == id) return &o;
  return nullptr;
}
Lease* ReferenceMatcher::lease(LeaseId id) {
  for (Lease& l : leases_)
    if (l.id == id) return &l;
  return nullptr;
}
const MarketSpec* ReferenceMatcher::market(const MarketId& id) const {
  for (const MarketSpec& m : config_.markets)
    if (m.id == id) return &m;
  return nullptr;
}
Price ReferenceMatcher::tick(const MarketId& id) const {
  const MarketSpec* m = market(id);
  return m ? m->tick : Price(100);
}
const Limits& ReferenceMatcher::limits_of(AccountId a) const {
  auto it = limits_.find(a);
  return it == limits_.end() ? config_.default_limits : it->second;
}

// ---------------------------------------------------------------------------------------------- order helpers

// "for duration seconds starting when it is matched (a spot bid)": a duration bid's window is [now, now + d).
Seconds ReferenceMatcher::bid_start(const Order& b) const { return b.request.duration ? now_ : *b.request.start; }
Seconds ReferenceMatcher::bid_end(const Order& b) const {
  return b.request.duration ? now_ + *b.request.duration : *b.request.end;
}

// "A pool's energy attributes are self-declared until an admin verifies them, with an expiry date": verified now
// when marked verified and the expiry (exclusive) is still ahead.
bool ReferenceMatcher::verified_now(const Pool& p) const { return p.verified && now_ < p.verified_until; }

// "Verified green pools sell at a discount ... | none | otherwise, unverified, or verification expired | 0"
ref::GreenClass ReferenceMatcher::pool_class(const Pool& p) const {
  if (!verified_now(p)) return ref::GreenClass{};
  return ref::green_class(policy_, p.spec.energy);
}
std::int32_t ReferenceMatcher::pool_discount(const Pool& p) const { return pool_class(p).discount_bps; }
GreenTier ReferenceMatcher::pool_green(const Pool& p) const { return pool_class(p).tier; }

const ref::FreeCapacity& ReferenceMatcher::free_of(OrderId id) const {
  static const ref::FreeCapacity none;
  auto it = free_.find(id);
  return it == free_.end() ? none : it->second;
}

// Every event carrying an order goes out through here, so that a sell's free capacity as of that event is
// reported beside it (event_free()).
template <class E>
void ReferenceMatcher::emit(EventSink& out, E event) {
  const bool sell = event.order.is_sell();
  const OrderId id = event.order.id;
  out.push_back(std::move(event));
  if (sell) event_free_.emplace_back(out.size() - 1, free_of(id).pieces());
}

// "the ask's pool satisfies every constraint of the bid"
bool ReferenceMatcher::pool_satisfies(const Pool& p, const Order& bid) const {
  const BidConstraints& c = bid.request.constraints;
  if (p.retired) return false;
  if (p.spec.market != bid.market) return false;  // "same market"
  // "Pools of tier spot sell only to bids marked interruptible."
  if (p.spec.tier == Tier::spot && !c.interruptible) return false;
  if (!c.tiers.empty() && std::find(c.tiers.begin(), c.tiers.end(), p.spec.tier) == c.tiers.end()) return false;
  if (!c.regions.empty() && std::find(c.regions.begin(), c.regions.end(), p.spec.region) == c.regions.end())
    return false;
  if (c.nvlink && !p.spec.nvlink) return false;
  if (c.min_fabric && p.spec.fabric < *c.min_fabric) return false;
  if (c.min_fabric_gbps && p.spec.fabric_gbps < *c.min_fabric_gbps) return false;
  if (c.min_sla_pct_x1000 && p.spec.sla_pct_x1000 < *c.min_sla_pct_x1000) return false;
  // "Energy constraints in bids (green_only, max_pue, min_renewable_pct, max_carbon_g_per_kwh) match verified
  // values only."
  const bool verified = verified_now(p);
  if (c.green_only && (!verified || pool_green(p) == GreenTier::none)) return false;
  if (c.max_pue_x1000 && (!verified || p.spec.energy.pue_x1000 > *c.max_pue_x1000)) return false;
  if (c.min_renewable_pct_x100 && (!verified || p.spec.energy.renewable_pct_x100 < *c.min_renewable_pct_x100))
    return false;
  if (c.max_carbon_g_per_kwh_x100 &&
      (!verified || p.spec.energy.carbon_g_per_kwh_x100 > *c.max_carbon_g_per_kwh_x100))
    return false;
  return true;
}

// "A fill between a bid and an ask is a multiple of lcm(bid's, ask's min_chunk)."
std::int64_t ReferenceMatcher::lot(const Order& bid, const Order& ask) const {
  return lcm64(bid.request.min_chunk.value, ask.request.min_chunk.value);
}

// What one fill between them can be now: the bid's rest and the ask's free capacity over the bid's whole
// window, rounded down to the lot.
Qty ReferenceMatcher::fill_qty(const Order& bid, const Order& ask) const {
  const std::int64_t free = free_of(ask.id).min(bid_start(bid), bid_end(bid));
  const std::int64_t q = std::min(bid.remaining.value, free);
  const std::int64_t l = lot(bid, ask);
  return Qty(q <= 0 ? 0 : q / l * l);
}

// "Eligibility: same market; the ask's pool satisfies every constraint of the bid; the bid's window lies inside
// the ask's clipped window and is at least the ask's min_duration; the ask has at least one lot free over the
// whole window." (A bid whose rest is less than one lot cannot trade with it either.)
bool ReferenceMatcher::eligible(const Order& bid, const Order& ask) const {
  if (!bid.is_open() || !ask.is_open() || !bid.is_buy() || !ask.is_sell()) return false;
  if (bid.market != ask.market) return false;
  const Pool* p = pool(ask.request.pool);
  if (!p || !pool_satisfies(*p, bid)) return false;
  const Seconds s = bid_start(bid);
  const Seconds e = bid_end(bid);
  if (s < ask.window_start || e > ask.window_end) return false;
  if (e - s < ask.request.min_duration) return false;
  return fill_qty(bid, ask).value >= lot(bid, ask);
}

// "An ask becomes filled when a trade leaves no piece of at least min_duration and one lot."
bool ReferenceMatcher::ask_has_piece(const Order& ask, const ref::FreeCapacity& free) const {
  const Seconds from = std::max(now_, ask.window_start);
  const Seconds need = std::max(ask.request.min_duration, Seconds(1));
  const std::int64_t chunk = std::max<std::int64_t>(ask.request.min_chunk.value, 1);
  bool in_run = false;
  Seconds run_start{0}, run_end{0};
  for (const ref::Segment& p : free.pieces()) {
    const Seconds a = std::max(p.from, from);
    const Seconds b = std::min(p.to, ask.window_end);
    if (a >= b) continue;
    if (p.gpus >= chunk) {
      if (!in_run || run_end != a) run_start = a;
      in_run = true;
      run_end = b;
      if (run_end - run_start >= need) return true;
    } else {
      in_run = false;
    }
  }
  return false;
}

// "Depth is shown per market and delivery bucket: spot or the UTC calendar month of the order's start. An ask is
// in spot once its window has started; a bid, when it is a duration bid or its window starts within the spot
// horizon."
Bucket ReferenceMatcher::bucket_of(const Order& o) const {
  if (o.is_buy()) {
    if (o.request.duration) return Bucket::spot();
    if (*o.request.start - now_ <= config_.spot_horizon) return Bucket::spot();
    return ref::month_of(*o.request.start);
  }
  if (o.window_start <= now_) return Bucket::spot();
  return ref::month_of(o.window_start);
}

// Derived fields of an open order as of now: its bucket, and an ask's GPU-hour accounting
// ("filled + lapsed (hours that passed unsold) + free GPU-hours = quantity x clipped window hours").
void ReferenceMatcher::refresh(Order& o) const {
  if (!o.is_open()) return;
  o.bucket = bucket_of(o);
  if (o.is_sell()) {
    const Seconds split = std::clamp(now_, o.window_start, o.window_end);
    o.lapsed_gpu_seconds = free_of(o.id).integral(o.window_start, split);
    o.free_gpu_seconds = free_of(o.id).integral(split, o.window_end);
  }
}

// An ask that ends: hours past are lapsed, its unsold rest is cancelled ("a cancelled ask reports its unsold rest
// as cancelled_gpu_hours"), and it offers nothing any more.
// (The same for every end, expiry included: a gtd ask that expires before its window ends cancels the rest.)
void ReferenceMatcher::end_ask(Order& a) {
  const Seconds split = std::clamp(now_, a.window_start, a.window_end);
  ref::FreeCapacity& free = free_[a.id];
  a.lapsed_gpu_seconds = free.integral(a.window_start, split);
  a.cancelled_gpu_seconds += free.integral(split, a.window_end);
  free.close_from(split);
  a.free_gpu_seconds = 0;
}

void ReferenceMatcher::finish_order(Order& o, OrderStatus s, Reason r) {
  refresh(o);
  if (o.is_sell()) {
    end_ask(o);
    // "provided the ask that sold them (open or filled, not cancelled) covers the new window"
    // The leases keep what preemption needs of the ask after it ends: its last list price, and whether it ended
    // neither open nor filled (cancelled, or expired at its expire_at).
    for (Lease& l : leases_) {
      if (l.sell_order != o.id) continue;
      if (mimic_unlinked_ && preemption_leases_.count(l.id)) continue;
      l.ask_list_price = o.request.price;
      if (s == OrderStatus::cancelled || s == OrderStatus::expired) l.ask_withdrawn = true;
    }
  }
  o.status = s;
  o.reason = r;
  o.updated_at = now_;
}

// "post_only never takes": true when the order would trade on arrival (own orders included: checked before STP).
bool ReferenceMatcher::would_take(const Order& o) const {
  for (const Order& other : orders_) {
    if (o.is_buy() && other.is_sell() && eligible(o, other) && crosses(o, other)) return true;
    if (o.is_sell() && other.is_buy() && eligible(other, o) && crosses(other, o)) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------- capacity

// "at every instant, the open asks' free capacity plus the pool's leases fit in the pool's GPUs"
std::int64_t ReferenceMatcher::committed_at(PoolId pool_id, Seconds t) const {
  std::int64_t sum = 0;
  for (const Order& o : orders_)
    if (o.is_sell() && o.is_open() && o.request.pool == pool_id) sum += free_of(o.id).at(t);
  for (const Lease& l : leases_) {
    if (l.pool != pool_id || l.ended) continue;
    const Seconds hold_end = l.status == LeaseStatus::preempted && l.ends_at ? std::min(*l.ends_at, l.end) : l.end;
    if (l.start <= t && t < hold_end) sum += l.quantity.value;
  }
  return sum;
}

namespace {

// Every instant in [from, to) where a pool's commitments may change, plus `from` itself.
std::vector<Seconds> breakpoints(const std::vector<Order>& orders, const std::map<OrderId, ref::FreeCapacity>& free,
                                 const std::vector<Lease>& leases, PoolId pool, Seconds from, Seconds to) {
  std::vector<Seconds> ts{from};
  auto add = [&](Seconds t) {
    if (t > from && t < to) ts.push_back(t);
  };
  for (const Order& o : orders) {
    if (!o.is_sell() || !o.is_open() || o.request.pool != pool) continue;
    auto it = free.find(o.id);
    if (it == free.end()) continue;
    for (Seconds t : it->second.breakpoints()) add(t);
  }
  for (const Lease& l : leases) {
    if (l.pool != pool || l.ended) continue;
    add(l.start);
    add(l.end);
    if (l.ends_at) add(*l.ends_at);
  }
  return ts;
}

}  // namespace

void ReferenceMatcher::committed_through(Seq seq) {
  for (auto it = client_ids_.begin(); it != client_ids_.end();) {
    const Order* o = order(it->second.first);
    if (o && !o->is_open() && o->updated_at <= now_ && o->id.value <= seq)
      it = client_ids_.erase(it);
    else
      ++it;
  }
}

// ---------------------------------------------------------------------------------------------- apply

void ReferenceMatcher::apply(const Command& cmd, EventSink& out) {
  // "The engine keeps now = the latest command time seen (an earlier stamp counts as that time)."
  now_ = std::max(now_, cmd.now);
  seq_ = cmd.seq;
  event_free_.clear();
  // "Every command first applies what time has done up to its stamp."
  time_step(out);
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, AddPool>) {
          // A pool is "a set of identical nodes in one place" of one market: at least one GPU per node, a node count
          // that is not negative, a region, "at most 1,000,000,000 GPUs"; malformed fields first, then an unknown
          // market (as for orders).
          const PoolSpec& spec = body.spec;
          if (spec.gpus_per_node <= 0 || spec.nodes < 0 || spec.region.empty() ||
              std::int64_t{spec.gpus_per_node} * spec.nodes > 1'000'000'000) {
            out.push_back(CommandRejected{cmd.seq, Reason::invalid_field, cmd.seq});
            return;
          }
          if (!market(spec.market)) {
            out.push_back(CommandRejected{cmd.seq, Reason::not_found, cmd.seq});
            return;
          }
          Pool p;
          p.id = PoolId(cmd.seq);
          p.provider = cmd.account;
          p.spec = body.spec;
          p.created_at = now_;
          p.updated_at = now_;
          pools_.push_back(p);
          out.push_back(PoolChanged{p});
        } else if constexpr (std::is_same_v<T, ResizePool>) {
          Pool* p = pool(body.pool);
          if (!p || p->provider != cmd.account || p->retired) {
            out.push_back(CommandRejected{cmd.seq, Reason::not_found, body.pool.value});
            return;
          }
          // "A pool can grow, shrink": to no nodes at all too, if nothing is held on it; to at most 1,000,000,000 GPUs.
          if (body.nodes < 0 || std::int64_t{p->spec.gpus_per_node} * body.nodes > 1'000'000'000) {
            out.push_back(CommandRejected{cmd.seq, Reason::invalid_field, body.pool.value});
            return;
          }
          // "A pool can grow, shrink (never below what its asks and leases hold)"
          const std::int64_t gpus = std::int64_t{p->spec.gpus_per_node} * body.nodes;
          const Seconds far = now_ + Seconds(std::int64_t{1} << 40);
          for (Seconds t : breakpoints(orders_, free_, leases_, p->id, now_, far)) {
            if (committed_at(p->id, t) > gpus) {
              out.push_back(CommandRejected{cmd.seq, Reason::pool_busy, body.pool.value});
              return;
            }
          }
          p->spec.nodes = body.nodes;
          p->updated_at = now_;
          out.push_back(PoolChanged{*p});
        } else if constexpr (std::is_same_v<T, RetirePool>) {
          Pool* p = pool(body.pool);
          if (!p || p->provider != cmd.account || p->retired) {
            out.push_back(CommandRejected{cmd.seq, Reason::not_found, body.pool.value});
            return;
          }
          // "be retired (when nothing is open on it)"
          bool busy = false;
          for (const Order& o : orders_)
            if (o.is_sell() && o.is_open() && o.request.pool == p->id) busy = true;
          for (const Lease& l : leases_)
            if (l.pool == p->id && !l.ended) busy = true;
          if (busy) {
            out.push_back(CommandRejected{cmd.seq, Reason::pool_busy, body.pool.value});
            return;
          }
          p->retired = true;
          p->updated_at = now_;
          out.push_back(PoolChanged{*p});
        } else if constexpr (std::is_same_v<T, VerifyPool>) {
          Pool* p = pool(body.pool);
          if (!p) {
            out.push_back(CommandRejected{cmd.seq, Reason::not_found, body.pool.value});
            return;
          }
          // "verified until expires_at, or withdraws verification"
          p->verified = body.verified;
          if (body.verified) {
            p->verified_until = body.expires_at;
            p->evidence = body.evidence;
            verification_pending_.insert(p->id);
          } else {
            verification_pending_.erase(p->id);
          }
          p->updated_at = now_;
          // "Verifying, withdrawing ... re-price the pool's open asks at once, keeping their time priority"
          reclassify(*p, true, out);
          match_woken_asks(out);
        } else if constexpr (std::is_same_v<T, PlaceOrder>) {
          place(cmd, body.order, out);
        } else if constexpr (std::is_same_v<T, Cancel>) {
          cancel(cmd, body.order, out);
        } else if constexpr (std::is_same_v<T, CancelAll>) {
          cancel_all(cmd, body.market, out);
        } else if constexpr (std::is_same_v<T, Amend>) {
          amend(cmd, body, out);
        } else if constexpr (std::is_same_v<T, ReleaseLease>) {
          release(cmd, body.lease, out);
        } else if constexpr (std::is_same_v<T, HaltMarket>) {
          if (!market(body.market)) {
            out.push_back(CommandRejected{cmd.seq, Reason::not_found, 0});
            return;
          }
          if (body.halted)
            halted_.insert(body.market);
          else
            halted_.erase(body.market);
          out.push_back(MarketHaltChanged{body.market, body.halted});
          // "a resume then matches as in 1d every open ask of that market"
          if (!body.halted) match_woken_asks(out);
        } else if constexpr (std::is_same_v<T, SetLimits>) {
          limits_[body.account] = body.limits;
          out.push_back(LimitsChanged{body.account, body.limits});
        } else if constexpr (std::is_same_v<T, SetGreenPolicy>) {
          policy_ = body.policy;
          out.push_back(GreenPolicyChanged{body.policy});
          // "every pool is re-classified and its asks re-priced", then matched as in 1d.
          for (Pool& p : pools_) reclassify(p, false, out);
          match_woken_asks(out);
        } else if constexpr (std::is_same_v<T, Tick>) {
          // "tick(now) ... is that first step alone"
        }
      },
      cmd.body);
  publish_views(out);
}

// ---------------------------------------------------------------------------------------------- time step

void ReferenceMatcher::time_step(EventSink& out) {
  expire_orders(out);
  advance_leases(out);
  expire_verifications(out);
  match_woken_asks(out);
}

// "An order is live only while its time allows: every command first applies the expiries due by its time."
void ReferenceMatcher::expire_orders(EventSink& out) {
  for (Order& o : orders_) {
    if (!o.is_open()) continue;
    bool due = false;
    // "gtd also expires at expire_at"
    if (o.request.time_in_force == TimeInForce::gtd && o.request.expire_at && *o.request.expire_at <= now_) due = true;
    // "a fixed-window bid also expires when its start passes"
    if (o.is_buy() && !o.request.duration && *o.request.start < now_) due = true;
    // "otherwise it expires when its window ends"
    if (o.is_sell() && o.window_end <= now_) due = true;
    if (!due) continue;
    finish_order(o, OrderStatus::expired, Reason::expired);
    emit(out, OrderDone{o});
  }
}

Micros ReferenceMatcher::lease_bill(const Lease& l, Seconds used_end) const {
  const Seconds len = l.end - l.start;
  const Seconds used = std::clamp(used_end - l.start, Seconds(0), len);
  return ref::cost_micros(l.price, l.quantity, used);
}

// "States: reserved (before start) -> active -> completed ... tick moves leases along."
void ReferenceMatcher::advance_leases(EventSink& out) {
  for (Lease& l : leases_) {
    if (l.ended) continue;
    if (l.status == LeaseStatus::preempted) {
      // "a preempted lease pays only the seconds used"
      if (l.ends_at && *l.ends_at <= now_) {
        l.billed = lease_bill(l, *l.ends_at);
        l.owed = 0;
        l.ended = true;
        out.push_back(LeaseChanged{l});
      }
      continue;
    }
    LeaseStatus next = l.status;
    if (l.status == LeaseStatus::reserved && l.start <= now_) next = LeaseStatus::active;
    if (l.end <= now_) next = LeaseStatus::completed;
    if (next == l.status) continue;
    l.status = next;
    if (next == LeaseStatus::completed) {
      l.billed = ref::cost_micros(l.price, l.quantity, l.end - l.start);
      l.owed = 0;
      l.ended = true;
    }
    out.push_back(LeaseChanged{l});
  }
}

// "Verifying, withdrawing, a verification's expiry and a policy change re-price the pool's open asks at once,
// keeping their time priority."
void ReferenceMatcher::reclassify(Pool& p, bool force_event, EventSink& out) {
  const GreenTier tier = pool_green(p);
  const std::int32_t bps = pool_discount(p);
  const bool changed = tier != p.green_tier || bps != p.green_discount_bps;
  if (!changed && !force_event) return;
  p.green_tier = tier;
  p.green_discount_bps = bps;
  if (changed) p.updated_at = now_;
  out.push_back(PoolChanged{p});
  for (Order& o : orders_) {
    if (!o.is_sell() || !o.is_open() || o.request.pool != p.id) continue;
    // "An ask's effective price = its list price x (1 - discount), rounded down to the tick."
    // A new discount re-prices the ask even where its effective price rounds to the same tick: the discount is
    // part of its price (its trades record it), so its OrderUpdated tells.
    const Price eff = ref::effective_price(o.request.price, bps, tick(o.market));
    if (eff == o.effective_price && bps == o.green_discount_bps) continue;
    o.green_discount_bps = bps;
    o.effective_price = eff;
    o.updated_at = now_;
    refresh(o);
    emit(out, OrderUpdated{o});
  }
}

void ReferenceMatcher::expire_verifications(EventSink& out) {
  // The pool stays marked verified (it is not verified now from verified_until on); the expiry is applied once.
  for (Pool& p : pools_) {
    if (!verification_pending_.count(p.id) || p.verified_until > now_) continue;
    verification_pending_.erase(p.id);
    // "PoolChanged: a pool was added, resized, retired, verified, or its green tier changed": an expiry that
    // leaves the tier as it was changes nothing anyone can see.
    reclassify(p, false, out);
  }
}

// "Time alone can make orders meet ...: the time step that begins every command matches such asks as incoming
// orders, so after every command no resting bid and ask are mutually eligible and crossed." engine.hpp 1d:
// every open ask of every non-halted market, in ask priority, that crosses a resting bid it is eligible with.
void ReferenceMatcher::match_woken_asks(EventSink& out) {
  std::vector<std::size_t> asks;
  for (std::size_t i = 0; i < orders_.size(); ++i)
    if (orders_[i].is_sell() && orders_[i].is_open() && !market_halted(orders_[i].market)) asks.push_back(i);
  std::stable_sort(asks.begin(), asks.end(), [&](std::size_t x, std::size_t y) {
    const Order& a = orders_[x];
    const Order& b = orders_[y];
    if (a.effective_price != b.effective_price) return a.effective_price < b.effective_price;
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.id < b.id;
  });
  for (std::size_t i : asks) {
    if (!orders_[i].is_open()) continue;
    bool crossing = false;
    for (const Order& b : orders_)
      if (b.is_buy() && eligible(b, orders_[i]) && crosses(b, orders_[i])) crossing = true;
    if (!crossing) continue;
    // "(a post_only one is cancelled instead)"
    if (orders_[i].request.post_only) {
      finish_order(orders_[i], OrderStatus::cancelled, Reason::would_take);
      emit(out, OrderDone{orders_[i]});
      continue;
    }
    match_incoming(i, out);
  }
}

// ---------------------------------------------------------------------------------------------- matching

// One fill between a bid and an ask: the trade, its lease, and both orders' accounting.
void ReferenceMatcher::trade(std::size_t bid_index, std::size_t ask_index, Qty q, Price price, Side taker,
                             EventSink& out) {
  Order& b = orders_[bid_index];
  Order& a = orders_[ask_index];
  const Pool& p = *pool(a.request.pool);
  const Seconds s = bid_start(b);
  const Seconds e = bid_end(b);
  Trade t;
  t.id = TradeId(next_trade_++);
  t.market = b.market;
  // "a trade whose window starts within the spot horizon (15 minutes) of the command's time is spot, later is
  // forward"
  t.bucket = s - now_ <= config_.spot_horizon ? Bucket::spot() : ref::month_of(s);
  t.time = now_;
  t.buy_order = b.id;
  t.sell_order = a.id;
  t.buyer = b.account;
  t.seller = p.provider;
  t.pool = p.id;
  t.lease = LeaseId(next_lease_++);
  t.quantity = q;
  t.start = s;
  t.end = e;
  t.price = price;
  t.list_price = a.request.price;
  t.green_discount_bps = a.green_discount_bps;
  t.tier = p.spec.tier;
  t.region = p.spec.region;
  t.green_tier = pool_green(p);
  t.taker = taker;
  // "Each trade creates a lease."
  Lease l;
  l.id = t.lease;
  l.trade = t.id;
  l.buyer = b.account;
  l.provider = p.provider;
  l.pool = p.id;
  l.market = b.market;
  l.buy_order = b.id;
  l.sell_order = a.id;
  l.quantity = q;
  l.start = s;
  l.end = e;
  l.price = price;
  l.list_price = a.request.price;
  l.green_discount_bps = a.green_discount_bps;
  // "interruptible (may land on spot-tier pools and be preempted there ...), where they are never preempted"
  l.interruptible = b.request.constraints.interruptible && p.spec.tier == Tier::spot;
  l.status = s <= now_ ? LeaseStatus::active : LeaseStatus::reserved;
  l.ends_at = e;
  l.owed = ref::cost_micros(price, q, e - s);
  l.bucket = t.bucket;
  l.ask_window_start = a.window_start;
  l.ask_window_end = a.window_end;
  l.ask_list_price = a.request.price;
  l.ask_min_chunk = a.request.min_chunk;
  l.ask_min_duration = a.request.min_duration;
  // The ask's free capacity is a step function of time: the sold GPUs leave it over the trade's window.
  free_[a.id].add(s, e, -q.value);
  a.filled_gpu_seconds += q.value * (e - s).value;
  a.status = OrderStatus::partially_filled;
  a.updated_at = now_;
  // "A bid counts GPUs: always filled + remaining = quantity."
  b.filled += q;
  b.remaining -= q;
  b.status = OrderStatus::partially_filled;
  b.updated_at = now_;
  refresh(a);
  refresh(b);
  leases_.push_back(l);
  out.push_back(TradeEvent{t});
  out.push_back(LeaseChanged{l});
}


namespace {
constexpr int kWalkDone = 0;
constexpr int kWalkSelfAbort = 1;  // "In an all-or-none walk, meeting an own order aborts it"
constexpr int kWalkStpStop = 2;    // cancel_newest / cancel_both stopped the incoming order
}  // namespace

// "For what it still lacks ... (a spot bid's window shifts by the notice; a fixed window that starts sooner cannot
// preempt)."
bool ReferenceMatcher::preemption_window(const Order& bid, Seconds& start, Seconds& end) const {
  if (bid.request.duration) {
    start = now_ + config_.preempt_notice;
    end = start + *bid.request.duration;
    return true;
  }
  if (*bid.request.start < now_ + config_.preempt_notice) return false;
  start = *bid.request.start;
  end = *bid.request.end;
  return true;
}

// "the ask's effective price": the ask as it is now if it is still open, else as it was when it ended.
Price ReferenceMatcher::preemption_list_price(const Lease& l) const {
  for (const Order& o : orders_)
    if (o.id == l.sell_order && o.is_open()) return o.request.price;
  return l.ask_list_price;
}

// "The preempting trade is priced at max(the ask's effective price, the preempted lease's price + 1 tick)"
Price ReferenceMatcher::preemption_price(const Lease& l) const {
  const Pool& p = *pool(l.pool);
  const Price tk = tick(l.market);
  const Price ask_effective = ref::effective_price(preemption_list_price(l), pool_discount(p), tk);
  return std::max(ask_effective, l.price + tk);
}

// The leases an interruptible bid may preempt now, cheapest first.
std::vector<std::size_t> ReferenceMatcher::preemptable_leases(const Order& bid) const {
  std::vector<std::size_t> out;
  const BidConstraints& c = bid.request.constraints;
  // "(single_pool bids do not preempt)"; only interruptible bids may land on spot-tier pools at all; post_only
  // never takes.
  if (!c.interruptible || c.single_pool || bid.request.post_only) return out;
  Seconds s{0}, e{0};
  if (!preemption_window(bid, s, e)) return out;
  if (e - s <= Seconds(0)) return out;
  for (std::size_t i = 0; i < leases_.size(); ++i) {
    const Lease& l = leases_[i];
    // "A lease already in its notice period is not preempted again."
    if (l.ended || (l.status != LeaseStatus::reserved && l.status != LeaseStatus::active)) continue;
    // "GPUs held by interruptible leases on spot-tier pools"
    if (!l.interruptible) continue;
    // Not one's own lease, bought or sold: a preemption is never a self-trade (engine.hpp, rules where DESIGN.md
    // is silent).
    if (l.buyer == bid.account || l.provider == bid.account) continue;
    const Pool* p = pool(l.pool);
    if (!p || p->spec.tier != Tier::spot || !pool_satisfies(*p, bid)) continue;
    // "priced below the bid's limit"
    if (l.price >= bid.request.price) continue;
    // "provided the ask that sold them (open or filled, not cancelled) covers the new window"
    if (l.ask_withdrawn || l.ask_window_start > s || l.ask_window_end < e) continue;
    // Those GPUs count as the ask's free capacity, so the ask's eligibility holds: "the bid's window ... is at least
    // the ask's min_duration".
    if (e - s < l.ask_min_duration) continue;
    // The lease must hold those GPUs over the whole new window, or the pool would be oversold after it ends.
    if (l.start > s || l.end < e) continue;
    // "never above the bid's limit"
    if (preemption_price(l) > bid.request.price) continue;
    out.push_back(i);
  }
  std::stable_sort(out.begin(), out.end(), [&](std::size_t x, std::size_t y) {
    if (leases_[x].price != leases_[y].price) return leases_[x].price < leases_[y].price;
    return leases_[x].id < leases_[y].id;
  });
  return out;
}

std::size_t ReferenceMatcher::preemptable_unless_post_only(OrderId bid) const {
  for (const Order& o : orders_) {
    if (o.id != bid || !o.is_open() || !o.is_buy()) continue;
    Order taker = o;
    taker.request.post_only = false;
    return preemptable_leases(taker).size();
  }
  return 0;
}

// Own leases are never candidates, so a preemption never meets self-trade prevention.
void ReferenceMatcher::preempt_for(std::size_t bid_index, EventSink& out) {
  Seconds s{0}, e{0};
  if (!preemption_window(orders_[bid_index], s, e)) return;
  for (std::size_t li : preemptable_leases(orders_[bid_index])) {
    Order& b = orders_[bid_index];
    if (b.remaining.value <= 0) break;
    // "the last one split so that no more GPUs than needed are taken", in whole lots.
    const std::int64_t lt = lcm64(b.request.min_chunk.value, leases_[li].ask_min_chunk.value);
    const std::int64_t q = std::min(leases_[li].quantity.value, b.remaining.value) / lt * lt;
    if (q <= 0) continue;
    const Price price = preemption_price(leases_[li]);
    const Pool& p = *pool(leases_[li].pool);
    Lease old = leases_[li];
    Trade t;
    t.id = TradeId(next_trade_++);
    t.market = b.market;
    t.bucket = s - now_ <= config_.spot_horizon ? Bucket::spot() : ref::month_of(s);
    t.time = now_;
    t.buy_order = b.id;
    t.sell_order = old.sell_order;  // "(for a preemption: the ask that sold the preempted lease)"
    t.buyer = b.account;
    t.seller = old.provider;  // "The counterparty is the preempted lease's provider"
    t.pool = old.pool;
    t.lease = LeaseId(next_lease_++);
    t.quantity = Qty(q);
    t.start = s;
    t.end = e;
    t.price = price;
    t.list_price = preemption_list_price(old);
    t.green_discount_bps = pool_discount(p);
    t.tier = p.spec.tier;
    t.region = p.spec.region;
    t.green_tier = pool_green(p);
    t.preemption = true;  // "its print is flagged preemption"
    t.preempted_lease = old.id;
    t.taker = Side::buy;
    Lease n;
    n.id = t.lease;
    n.trade = t.id;
    n.buyer = b.account;
    n.provider = old.provider;
    n.pool = old.pool;
    n.market = old.market;
    n.buy_order = b.id;
    n.sell_order = old.sell_order;
    n.quantity = Qty(q);
    n.start = s;
    n.end = e;
    n.price = price;
    n.list_price = t.list_price;
    n.green_discount_bps = t.green_discount_bps;
    n.interruptible = true;
    // "and the new lease starts then"
    n.status = s <= now_ ? LeaseStatus::active : LeaseStatus::reserved;
    n.ends_at = e;
    n.owed = ref::cost_micros(price, Qty(q), e - s);
    n.bucket = t.bucket;
    n.ask_window_start = old.ask_window_start;
    n.ask_window_end = old.ask_window_end;
    n.ask_list_price = old.ask_list_price;
    n.ask_min_chunk = old.ask_min_chunk;
    n.ask_min_duration = old.ask_min_duration;
    n.ask_withdrawn = old.ask_withdrawn;
    leases_.push_back(n);
    preemption_leases_.insert(n.id);
    out.push_back(TradeEvent{t});
    out.push_back(LeaseChanged{n});
    // "a preemption that takes part of a lease splits the untouched rest off into a new lease"
    if (q < old.quantity.value) {
      Lease rest = old;
      rest.id = LeaseId(next_lease_++);
      rest.split_from = old.id;
      rest.quantity = Qty(old.quantity.value - q);
      rest.owed = ref::cost_micros(rest.price, rest.quantity, rest.end - rest.start);
      leases_.push_back(rest);
      out.push_back(LeaseChanged{rest});
    }
    // "those leases ... end preempt_notice seconds after the trade"; "a preempted lease pays only the seconds used"
    Lease& pl = leases_[li];
    pl.quantity = Qty(q);
    pl.status = LeaseStatus::preempted;
    pl.preempted_at = now_;
    pl.ends_at = now_ + config_.preempt_notice;
    pl.owed = lease_bill(pl, *pl.ends_at);
    out.push_back(LeaseChanged{pl});
    out.push_back(LeasePreempted{pl.id, pl.buyer, pl.quantity, now_, *pl.ends_at, t.id});
    Order& bb = orders_[bid_index];
    bb.filled += Qty(q);
    bb.remaining -= Qty(q);
    bb.status = OrderStatus::partially_filled;
    bb.updated_at = now_;
    refresh(bb);
  }
}

// "Priority: an incoming bid meets eligible asks in ascending effective price, then arrival order ... They trade
// while bid price >= ask effective price, at the resting order's price."
int ReferenceMatcher::walk_bid(std::size_t bid_index, bool abort_on_self, std::optional<PoolId> only_pool,
                               EventSink& out) {
  std::vector<std::size_t> asks;
  for (std::size_t i = 0; i < orders_.size(); ++i) {
    const Order& a = orders_[i];
    if (!a.is_sell() || !eligible(orders_[bid_index], a) || !crosses(orders_[bid_index], a)) continue;
    if (only_pool && a.request.pool != *only_pool) continue;
    asks.push_back(i);
  }
  std::stable_sort(asks.begin(), asks.end(), [&](std::size_t x, std::size_t y) {
    const Order& a = orders_[x];
    const Order& b = orders_[y];
    if (a.effective_price != b.effective_price) return a.effective_price < b.effective_price;
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.id < b.id;
  });
  for (std::size_t ai : asks) {
    Order& b = orders_[bid_index];
    Order& a = orders_[ai];
    if (b.remaining.value <= 0) break;
    if (!eligible(b, a) || !crosses(b, a)) continue;
    // "Self-trade prevention applies only to an own order that is eligible and crosses, with the incoming
    // order's mode"
    if (a.account == b.account) {
      if (abort_on_self) return kWalkSelfAbort;
      if (b.request.stp == StpMode::cancel_oldest || b.request.stp == StpMode::cancel_both) {
        finish_order(a, OrderStatus::cancelled, Reason::self_trade);
        emit(out, OrderDone{a});
      }
      if (b.request.stp != StpMode::cancel_oldest) return kWalkStpStop;
      continue;
    }
    const Qty q = fill_qty(b, a);
    if (q.value <= 0) continue;
    trade(bid_index, ai, q, a.effective_price, Side::buy, out);
    Order& rest = orders_[ai];
    if (!ask_has_piece(rest)) {
      finish_order(rest, OrderStatus::filled, Reason::none);
      emit(out, OrderDone{rest});
    } else {
      emit(out, OrderUpdated{rest});
    }
  }
  // "A bid first takes free capacity as usual. For what it still lacks, ..." (not for single_pool bids)
  if (!only_pool && orders_[bid_index].remaining.value > 0) preempt_for(bid_index, out);
  return kWalkDone;
}

// "an incoming ask meets eligible resting bids in descending price, then arrival order"
int ReferenceMatcher::walk_ask(std::size_t ask_index, bool abort_on_self, EventSink& out) {
  std::vector<std::size_t> bids;
  for (std::size_t i = 0; i < orders_.size(); ++i) {
    const Order& b = orders_[i];
    if (b.is_buy() && eligible(b, orders_[ask_index]) && crosses(b, orders_[ask_index])) bids.push_back(i);
  }
  std::stable_sort(bids.begin(), bids.end(), [&](std::size_t x, std::size_t y) {
    const Order& a = orders_[x];
    const Order& b = orders_[y];
    if (a.request.price != b.request.price) return a.request.price > b.request.price;
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.id < b.id;
  });
  for (std::size_t bi : bids) {
    Order& a = orders_[ask_index];
    Order& b = orders_[bi];
    if (!eligible(b, a) || !crosses(b, a)) continue;
    if (a.account == b.account) {
      if (abort_on_self) return kWalkSelfAbort;
      if (a.request.stp == StpMode::cancel_oldest || a.request.stp == StpMode::cancel_both) {
        finish_order(b, OrderStatus::cancelled, Reason::self_trade);
        emit(out, OrderDone{b});
      }
      if (a.request.stp != StpMode::cancel_oldest) return kWalkStpStop;
      continue;
    }
    const Qty q = fill_qty(b, a);
    if (q.value <= 0) continue;
    trade(bi, ask_index, q, b.request.price, Side::sell, out);
    Order& rest = orders_[bi];
    if (rest.remaining.value == 0) {
      finish_order(rest, OrderStatus::filled, Reason::none);
      emit(out, OrderDone{rest});
    } else {
      emit(out, OrderUpdated{rest});
    }
  }
  return kWalkDone;
}

// "single_pool sums per pool during the walk and takes the first pool that reaches the quantity."
std::optional<PoolId> ReferenceMatcher::single_pool_choice(const Order& bid, bool& met_self) const {
  met_self = false;
  std::vector<std::size_t> asks;
  for (std::size_t i = 0; i < orders_.size(); ++i)
    if (orders_[i].is_sell() && eligible(bid, orders_[i]) && crosses(bid, orders_[i])) asks.push_back(i);
  std::stable_sort(asks.begin(), asks.end(), [&](std::size_t x, std::size_t y) {
    const Order& a = orders_[x];
    const Order& b = orders_[y];
    if (a.effective_price != b.effective_price) return a.effective_price < b.effective_price;
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.id < b.id;
  });
  std::map<PoolId, std::int64_t> sums;
  for (std::size_t ai : asks) {
    const Order& a = orders_[ai];
    if (a.account == bid.account) {
      met_self = true;
      return std::nullopt;
    }
    std::int64_t& sum = sums[a.request.pool];
    Order rest = bid;
    rest.remaining = Qty(bid.request.quantity.value - sum);
    sum += fill_qty(rest, a).value;
    if (sum >= bid.request.quantity.value) return a.request.pool;
  }
  return std::nullopt;
}

// Matches an incoming order and reports its own state last (engine.hpp 3).
void ReferenceMatcher::match_incoming(std::size_t index, EventSink& out) {
  const Order before = orders_[index];
  const bool is_buy = before.is_buy();
  const TimeInForce tif = before.request.time_in_force;
  const bool single_pool = is_buy && before.request.constraints.single_pool;
  // "All-or-none (fok, and single_pool ...): the same walk in priority order, greedy and without backtracking, done
  // first without changing anything; it commits only if it covers the whole quantity."
  if (tif == TimeInForce::fok || single_pool) {
    // The trial writes after the events so far, so that its event_free() indices hold once it is kept.
    ReferenceMatcher trial = *this;
    EventSink trial_out = out;
    int r = kWalkDone;
    bool covered = false;
    if (single_pool) {
      bool met_self = false;
      const std::optional<PoolId> choice = trial.single_pool_choice(trial.orders_[index], met_self);
      if (met_self) r = kWalkSelfAbort;
      else if (choice) r = trial.walk_bid(index, true, choice, trial_out);
      covered = r == kWalkDone && choice && trial.orders_[index].remaining.value == 0;
    } else if (is_buy) {
      r = trial.walk_bid(index, true, std::nullopt, trial_out);
      covered = r == kWalkDone && trial.orders_[index].remaining.value == 0;
    } else {
      // A fok ask: covers its whole quantity when the walk leaves it nothing to offer.
      r = trial.walk_ask(index, true, trial_out);
      covered = r == kWalkDone && trial.orders_[index].filled_gpu_seconds > 0 && !trial.ask_has_piece(trial.orders_[index]);
    }
    Order& o = orders_[index];
    if (r == kWalkSelfAbort) {
      // "meeting an own order aborts it and rejects the incoming order (self_trade)"
      finish_order(o, OrderStatus::rejected, Reason::self_trade);
      emit(out, OrderDone{o});
      return;
    }
    if (!covered) {
      // "fok fills entirely now or not at all": the unfilled order is cancelled (API.md).
      finish_order(o, OrderStatus::cancelled, Reason::none);
      emit(out, OrderDone{o});
      return;
    }
    *this = std::move(trial);
    out = std::move(trial_out);
    Order& done = orders_[index];
    finish_order(done, OrderStatus::filled, Reason::none);
    emit(out, OrderDone{done});
    return;
  }
  const int r = is_buy ? walk_bid(index, false, std::nullopt, out) : walk_ask(index, false, out);
  Order& o = orders_[index];
  const bool traded = is_buy ? o.filled != before.filled : o.filled_gpu_seconds != before.filled_gpu_seconds;
  const bool any_fill = is_buy ? o.filled.value > 0 : o.filled_gpu_seconds > 0;
  if (r == kWalkStpStop) {
    // "An order that STP stops before any fill is rejected (self_trade); after some fills, its rest is cancelled
    // with that reason."
    // (Only an order arriving now is "rejected": one that rested before, re-priced or woken, is cancelled.)
    const bool arriving = o.priority == seq_ && o.created_at == now_ && o.id.value == seq_;
    finish_order(o, any_fill || !arriving ? OrderStatus::cancelled : OrderStatus::rejected, Reason::self_trade);
    emit(out, OrderDone{o});
    return;
  }
  if (is_buy ? o.remaining.value == 0 : (traded && !ask_has_piece(o))) {
    finish_order(o, OrderStatus::filled, Reason::none);
    emit(out, OrderDone{o});
    return;
  }
  // "ioc fills what it can now and cancels the rest"
  if (tif == TimeInForce::ioc) {
    finish_order(o, OrderStatus::cancelled, Reason::none);
    emit(out, OrderDone{o});
    return;
  }
  if (traded) emit(out, OrderUpdated{o});
}

// ---------------------------------------------------------------------------------------------- commands

Order ReferenceMatcher::make_order(const Command& cmd, const OrderRequest& r) const {
  Order o;
  o.id = OrderId(cmd.seq);
  o.account = cmd.account;
  o.request = r;
  o.priority = cmd.seq;
  o.created_at = now_;
  o.updated_at = now_;
  if (r.side == Side::buy) {
    o.market = r.market;
    if (!r.duration) {
      o.window_start = *r.start;
      o.window_end = *r.end;
    }
    o.effective_price = r.price;
    o.filled = Qty(0);
    o.remaining = r.quantity;
  } else {
    const Pool& p = *pool(r.pool);
    o.market = p.spec.market;
    // "At entry the window is clipped to [max(start, now), end)"
    o.window_start = std::max(*r.start, now_);
    o.window_end = *r.end;
    o.green_discount_bps = pool_discount(p);
    o.effective_price = ref::effective_price(r.price, o.green_discount_bps, tick(o.market));
    if (o.window_end > o.window_start) {
      o.total_gpu_seconds = r.quantity.value * (o.window_end - o.window_start).value;
      o.free_gpu_seconds = o.total_gpu_seconds;
    }
  }
  o.bucket = bucket_of(o);
  return o;
}

// The engine's rejects (DESIGN.md §4 "Rejections"), stored as a rejected order.
Reason ReferenceMatcher::engine_reject(const Command& cmd, const Order& o) const {
  const OrderRequest& r = o.request;
  // "An admin can halt a market (new orders rejected with market_halted, cancels allowed)"
  if (market_halted(o.market)) return Reason::market_halted;
  // "prices off-tick are rejected"
  if (r.price.value % tick(o.market).value != 0) return Reason::off_tick;
  // "an order's quantity must be a multiple of it (quantity_not_multiple_of_chunk)"
  if (r.quantity.value % r.min_chunk.value != 0) return Reason::quantity_not_multiple_of_chunk;
  // "A fixed window that starts in the past is rejected (window_in_past)"; "an ask whose window has already
  // ended is rejected"
  if (o.is_buy() && !r.duration && *r.start < now_) return Reason::window_in_past;
  if (o.is_sell() && *r.end <= now_) return Reason::window_in_past;
  // "An order that would exceed one is rejected (exposure_limit)": open orders (both sides), open GPUs of bids,
  // open notional (DESIGN.md §4 "Exposure limits"), each counted with the new order.
  const Limits& lim = limits_of(cmd.account);
  std::int64_t open_orders = 0;
  std::int64_t open_gpus = 0;
  for (const Order& x : orders_) {
    if (x.account != cmd.account || !x.is_open()) continue;
    ++open_orders;
    if (x.is_buy()) open_gpus += x.remaining.value;
  }
  if (open_orders + 1 > lim.max_open_orders) return Reason::exposure_limit;
  if (o.is_buy()) {
    if (open_gpus + r.quantity.value > lim.max_open_gpus.value) return Reason::exposure_limit;
    const Int128 with_new = notional_x3600(cmd.account, OrderId()) +
                            static_cast<Int128>(r.price.value) * r.quantity.value * bid_length(o).value;
    if (with_new > static_cast<Int128>(lim.max_open_notional) * 3600) return Reason::exposure_limit;
  } else {
    // "an ask that would break this is rejected (insufficient_pool_capacity)"
    const Pool& p = *pool(r.pool);
    const std::int64_t pool_gpus = std::int64_t{p.spec.gpus_per_node} * p.spec.nodes;
    for (Seconds t : breakpoints(orders_, free_, leases_, p.id, o.window_start, o.window_end))
      if (committed_at(p.id, t) + r.quantity.value > pool_gpus) return Reason::insufficient_pool_capacity;
  }
  return Reason::none;
}

// DESIGN.md §4: "open notional (Σ price × GPUs × hours of its open bids, plus what its leases still owe)", in
// micro-dollars x 3600 so that it stays exact; the bid `except` (an amended one) is left out.
Int128 ReferenceMatcher::notional_x3600(AccountId a, OrderId except) const {
  Int128 sum = 0;
  for (const Order& x : orders_)
    if (x.account == a && x.is_open() && x.is_buy() && x.id != except)
      sum += static_cast<Int128>(x.request.price.value) * x.remaining.value * bid_length(x).value;
  for (const Lease& l : leases_)
    if (l.buyer == a && !l.ended) sum += static_cast<Int128>(l.owed) * 3600;
  return sum;
}

void ReferenceMatcher::place(const Command& cmd, const OrderRequest& r, EventSink& out) {
  // "A repeat with the same body returns the original order (HTTP 200, no new effect); a different body is
  // rejected (idempotency_conflict, 422)."
  if (!r.client_order_id.empty()) {
    auto it = client_ids_.find({cmd.account, r.client_order_id});
    if (it != client_ids_.end()) {
      Order& original = *order(it->second.first);
      refresh(original);  // the original order as of now
      if (it->second.second == r)
        emit(out, OrderDuplicate{original});
      else
        out.push_back(CommandRejected{cmd.seq, Reason::idempotency_conflict, it->second.first.value});
      return;
    }
  }
  // Checks the server makes first (DESIGN.md: 4xx): malformed fields and combinations, then an unknown market
  // or a pool that is unknown, retired or another account's. The engine still stores such an order as rejected
  // (engine.hpp "Validation order of a PlaceOrder"), without a market, window or price of its own.
  Reason invalid = Reason::none;
  // API.md "Placing an order": a buy names "either start+end or duration" (exactly one of them), a sell "start,
  // end" (and no duration); a window ends after it starts, a duration is positive. docs/market-rules.md: post_only
  // is a flag of gtc and gtd orders; DESIGN.md: single_pool "must be ioc or fok"; a min_duration is not negative.
  const bool has_window = r.start && r.end;
  const bool window_ok = has_window && *r.end > *r.start;
  const bool shape_ok = r.side == Side::sell
                            ? window_ok && !r.duration
                            : (has_window ? window_ok && !r.duration
                                          : !r.start && !r.end && r.duration && *r.duration > Seconds(0));
  if (r.quantity.value <= 0 || r.min_chunk.value <= 0 || r.price.value <= 0 || r.min_duration < Seconds(0) ||
      (r.time_in_force == TimeInForce::gtd && !r.expire_at) ||
      (r.post_only && r.time_in_force != TimeInForce::gtc && r.time_in_force != TimeInForce::gtd) ||
      (r.side == Side::buy && r.constraints.single_pool && r.time_in_force != TimeInForce::ioc &&
       r.time_in_force != TimeInForce::fok) ||
      !shape_ok)
    invalid = Reason::invalid_field;
  else if (r.side == Side::sell ? (!pool(r.pool) || pool(r.pool)->provider != cmd.account || pool(r.pool)->retired)
                                : !market(r.market))
    invalid = Reason::not_found;
  if (invalid != Reason::none) {
    Order o;
    o.id = OrderId(cmd.seq);
    o.account = cmd.account;
    o.request = r;
    o.effective_price = r.price;
    o.priority = cmd.seq;
    o.created_at = now_;
    o.updated_at = now_;
    if (r.side == Side::buy) o.remaining = r.quantity;
    o.status = OrderStatus::rejected;
    o.reason = invalid;
    if (!r.client_order_id.empty()) client_ids_[{cmd.account, r.client_order_id}] = {o.id, r};
    orders_.push_back(o);
    emit(out, OrderRejected{o});
    return;
  }
  Order o = make_order(cmd, r);
  const Reason reject = engine_reject(cmd, o);
  if (!r.client_order_id.empty()) client_ids_[{cmd.account, r.client_order_id}] = {o.id, r};
  if (reject != Reason::none) {
    // A rejected order is stored as sent: it never had a window, an effective price or GPU-hours on offer.
    o.bucket = Bucket::spot();
    o.window_start = Seconds(0);
    o.window_end = Seconds(0);
    if (o.is_sell()) {
      o.effective_price = r.price;
      o.green_discount_bps = 0;
      o.total_gpu_seconds = 0;
      o.free_gpu_seconds = 0;
    }
    o.status = OrderStatus::rejected;
    o.reason = reject;
    orders_.push_back(o);
    emit(out, OrderRejected{o});
    return;
  }
  orders_.push_back(o);
  const std::size_t index = orders_.size() - 1;
  // "An ask offers quantity GPUs ... over [start, end)", clipped at entry.
  if (o.is_sell()) free_[o.id].add(o.window_start, o.window_end, r.quantity.value);
  emit(out, OrderAccepted{o});
  // "An order is live only while its time allows": a gtd order whose expire_at is not after now never trades.
  if (r.time_in_force == TimeInForce::gtd && *r.expire_at <= now_) {
    finish_order(orders_[index], OrderStatus::expired, Reason::expired);
    emit(out, OrderDone{orders_[index]});
    return;
  }
  // "post_only never takes: if it would trade on arrival it is rejected (would_take)" (checked before STP)
  if (r.post_only && would_take(orders_[index])) {
    finish_order(orders_[index], OrderStatus::rejected, Reason::would_take);
    emit(out, OrderDone{orders_[index]});
    return;
  }
  match_incoming(index, out);
}

void ReferenceMatcher::cancel(const Command& cmd, OrderId id, EventSink& out) {
  Order* o = order(id);
  if (!o || o->account != cmd.account || !o->is_open()) {
    out.push_back(CommandRejected{cmd.seq, Reason::not_found, id.value});
    return;
  }
  finish_order(*o, OrderStatus::cancelled, Reason::none);
  emit(out, OrderDone{*o});
}

// "Cancels every open order of the command's account (in one market if given), in id order."
void ReferenceMatcher::cancel_all(const Command& cmd, const std::optional<MarketId>& m, EventSink& out) {
  for (Order& o : orders_) {
    if (o.account != cmd.account || !o.is_open() || (m && o.market != *m)) continue;
    finish_order(o, OrderStatus::cancelled, Reason::none);
    emit(out, OrderDone{o});
  }
}

// The amended order's own changes, without checks or events: a lower quantity (a bid's remaining follows; a
// sell's cut leaves its free capacity over the rest of its window and counts as cancelled), a new price (the
// order loses its time priority: "a new price loses it"; a sell's effective price follows).
void ReferenceMatcher::change_order(Order& o, const Amend& a) {
  if (a.quantity && *a.quantity != o.request.quantity) {
    const std::int64_t cut = (o.request.quantity - *a.quantity).value;
    o.request.quantity = *a.quantity;
    if (o.is_buy()) {
      o.remaining = o.request.quantity - o.filled;
    } else {
      const Seconds from = std::max(now_, o.window_start);
      if (from < o.window_end) {
        free_[o.id].add(from, o.window_end, -cut);
        o.cancelled_gpu_seconds += cut * (o.window_end - from).value;
      }
    }
  }
  if (a.price && *a.price != o.request.price) {
    o.request.price = *a.price;
    o.priority = seq_;
    o.effective_price =
        o.is_buy() ? *a.price : ref::effective_price(*a.price, o.green_discount_bps, tick(o.market));
  }
  o.updated_at = now_;
  refresh(o);
}

// "amend (lowering quantity keeps priority; a new price loses it)", with the rules of docs/market-rules.md
// ("Amend", and "Amend checks" for the order in which they answer).
void ReferenceMatcher::amend(const Command& cmd, const Amend& a, EventSink& out) {
  auto refuse = [&](Reason r) { out.push_back(CommandRejected{cmd.seq, r, a.order.value}); };
  Order* found = order(a.order);
  // Only one's own open order can be amended.
  if (!found || found->account != cmd.account || !found->is_open()) return refuse(Reason::not_found);
  const std::size_t index = static_cast<std::size_t>(found - orders_.data());
  const Order& o = orders_[index];
  // "While a market is halted amends are refused (market_halted)"
  if (market_halted(o.market)) return refuse(Reason::market_halted);
  const Qty q = a.quantity ? *a.quantity : o.request.quantity;
  const Price price = a.price ? *a.price : o.request.price;
  // "quantity may only go down" (and an order of no GPUs is no order)
  if (q > o.request.quantity || q.value <= 0) return refuse(Reason::invalid_amend);
  // "an order's quantity must be a multiple of it (quantity_not_multiple_of_chunk)"
  if (q.value % o.request.min_chunk.value != 0) return refuse(Reason::quantity_not_multiple_of_chunk);
  if (price.value <= 0) return refuse(Reason::invalid_field);
  // "prices off-tick are rejected"
  if (price.value % tick(o.market).value != 0) return refuse(Reason::off_tick);
  const std::int64_t cut = (o.request.quantity - q).value;
  if (o.is_buy()) {
    // "for a bid it must stay above what is filled" (nothing left to buy is a cancel)
    if (q <= o.filled) return refuse(Reason::invalid_amend);
    // "An order that would exceed one is rejected (exposure_limit)": the account's open notional with the bid's
    // new price and remaining. Quantity only goes down, so only a higher price can raise it.
    const Int128 others = notional_x3600(o.account, o.id);
    const Int128 before = others + static_cast<Int128>(o.request.price.value) * o.remaining.value * bid_length(o).value;
    const Int128 after = others + static_cast<Int128>(price.value) * (q - o.filled).value * bid_length(o).value;
    const Int128 limit = static_cast<Int128>(limits_of(o.account).max_open_notional) * 3600;
    if (after > limit && after > before) return refuse(Reason::exposure_limit);
  } else if (cut > 0) {
    // "for an ask the cut must be free over the rest of its window (sold capacity cannot be un-sold), must leave
    // a piece the ask can still sell"
    const Seconds from = std::max(now_, o.window_start);
    if (free_of(o.id).min(from, o.window_end) < cut) return refuse(Reason::invalid_amend);
    ref::FreeCapacity rest = free_of(o.id);
    rest.add(from, o.window_end, -cut);
    if (!ask_has_piece(o, rest)) return refuse(Reason::invalid_amend);
  }
  const bool new_price = price != o.request.price;
  // "A post_only order whose new price would trade keeps its old price (would_take)": the order as amended is
  // tried on a copy of the whole market, and the amend is refused if it would trade there.
  if (new_price && o.request.post_only) {
    ReferenceMatcher trial = *this;
    trial.change_order(trial.orders_[index], a);
    if (trial.would_take(trial.orders_[index])) return refuse(Reason::would_take);
  }
  change_order(orders_[index], a);
  emit(out, OrderUpdated{orders_[index]});
  // "then, if its new price crosses, matching (3)" as an incoming order (a bid may also preempt).
  if (new_price) match_incoming(index, out);
}

// "Releasing ends access early and returns the GPUs to the pool (not to an ask); a firm lease is still owed for
// its whole window; an interruptible lease released by its buyer pays the seconds used, at least the lesser of
// min_bill and its window."
void ReferenceMatcher::release(const Command& cmd, LeaseId id, EventSink& out) {
  Lease* l = lease(id);
  if (!l || l->buyer != cmd.account || l->ended) {
    out.push_back(CommandRejected{cmd.seq, Reason::not_found, id.value});
    return;
  }
  if (l->status != LeaseStatus::reserved && l->status != LeaseStatus::active) {
    out.push_back(CommandRejected{cmd.seq, Reason::lease_not_open, id.value});
    return;
  }
  const Seconds len = l->end - l->start;
  if (l->interruptible) {
    const Seconds used = std::clamp(now_ - l->start, Seconds(0), len);
    l->billed = ref::cost_micros(l->price, l->quantity, std::max(used, std::min(config_.min_bill, len)));
  } else {
    l->billed = ref::cost_micros(l->price, l->quantity, len);
  }
  l->status = LeaseStatus::released;
  l->ends_at = std::max(now_, l->start);  // a lease released before its start ends when it would have begun
  l->owed = 0;
  l->ended = true;
  out.push_back(LeaseChanged{*l});
}

// ---------------------------------------------------------------------------------------------- book views

// "An ask's quantity there is what it can sell for at least min_duration from its reference instant (max of now
// and its start), rounded down to its lot."
std::map<ReferenceMatcher::ViewKey, ReferenceMatcher::View> ReferenceMatcher::compute_views() const {
  std::map<ViewKey, View> views;
  for (const Order& o : orders_) {
    if (!o.is_open()) continue;
    const ViewKey key{o.market, bucket_of(o)};
    if (o.is_buy()) {
      if (o.remaining.value <= 0) continue;
      View& v = views[key];
      if (constrained_bid(o)) {
        v.constrained.orders += 1;
        v.constrained.gpus += o.remaining;
      } else {
        v.bids[o.request.price] += o.remaining;
      }
    } else {
      const Seconds from = std::max(now_, o.window_start);
      const Seconds len = std::max(o.request.min_duration, Seconds(1));
      if (from + len > o.window_end) continue;
      const std::int64_t chunk = std::max<std::int64_t>(o.request.min_chunk.value, 1);
      const std::int64_t q = free_of(o.id).min(from, from + len) / chunk * chunk;
      if (q <= 0) continue;
      views[key].asks[o.effective_price] += Qty(q);
    }
  }
  return views;
}

Depth ReferenceMatcher::depth(const MarketId& m, Bucket bucket) const {
  Depth d;
  auto seq = view_seq_.find({m, bucket});
  if (seq != view_seq_.end()) d.sequence = seq->second;
  auto it = published_.find({m, bucket});
  if (it == published_.end()) return d;
  for (auto p = it->second.bids.rbegin(); p != it->second.bids.rend(); ++p) d.bids.push_back(Level{p->first, p->second});
  for (const auto& [price, qty] : it->second.asks) d.asks.push_back(Level{price, qty});
  d.constrained_bids = it->second.constrained;
  return d;
}

// "Each (market, bucket) view has its own sequence number, bumped by one per published delta (a command that
// changes several levels publishes one delta carrying them all)."
void ReferenceMatcher::publish_views(EventSink& out) {
  std::map<ViewKey, View> now_views = compute_views();
  std::set<ViewKey> keys;
  for (const auto& [k, v] : published_) keys.insert(k);
  for (const auto& [k, v] : now_views) keys.insert(k);
  for (const ViewKey& k : keys) {
    const View before = published_.count(k) ? published_.at(k) : View{};
    const View after = now_views.count(k) ? now_views.at(k) : View{};
    if (before == after) continue;
    BookDelta d;
    d.market = k.first;
    d.bucket = k.second;
    std::set<Price> bid_prices, ask_prices;
    for (const auto& [p, q] : before.bids) bid_prices.insert(p);
    for (const auto& [p, q] : after.bids) bid_prices.insert(p);
    for (const auto& [p, q] : before.asks) ask_prices.insert(p);
    for (const auto& [p, q] : after.asks) ask_prices.insert(p);
    auto qty_at = [](const std::map<Price, Qty>& m, Price p) { auto it = m.find(p); return it == m.end() ? Qty(0) : it->second; };
    for (auto it = bid_prices.rbegin(); it != bid_prices.rend(); ++it)
      if (qty_at(before.bids, *it) != qty_at(after.bids, *it))
        d.changes.push_back(LevelChange{Side::buy, *it, qty_at(after.bids, *it)});
    for (Price p : ask_prices)
      if (qty_at(before.asks, p) != qty_at(after.asks, p)) d.changes.push_back(LevelChange{Side::sell, p, qty_at(after.asks, p)});
    d.constrained_bids = after.constrained;
    d.sequence = ++view_seq_[k];
    out.push_back(d);
  }
  published_ = std::move(now_views);
}

}  // namespace gpuex::matching::test
