// Human-readable renderings of orders, leases, trades and events, for test diagnostics.
#include "matching/event.hpp"

#include <sstream>
#include <type_traits>

namespace gpuex::matching {
namespace {

std::string steps_text(const Steps& s) {
  std::ostringstream o;
  o << '[';
  bool first = true;
  for (const Step& p : s.pieces()) {
    if (!first) o << ',';
    first = false;
    o << '[' << p.from.value << ',' << p.to.value << ',' << p.gpus << ']';
  }
  o << ']';
  return o.str();
}

template <class T>
std::string opt(const std::optional<T>& v) {
  if (!v) return "-";
  if constexpr (std::is_same_v<T, Seconds> || std::is_same_v<T, Qty> || std::is_same_v<T, Price>) {
    return std::to_string(v->value);
  } else if constexpr (std::is_same_v<T, Fabric>) {
    return std::string(to_string(*v));
  } else {
    return std::to_string(*v);
  }
}

}  // namespace

std::string to_string(const Order& x) {
  std::ostringstream o;
  const OrderRequest& r = x.request;
  o << "order{id=" << x.id.value << " acct=" << x.account.value << " cid=" << r.client_order_id << ' '
    << to_string(r.side) << ' ' << x.market.value();
  if (x.is_sell()) o << " pool=" << r.pool.value;
  o << " price=" << r.price.value << " eff=" << x.effective_price.value << " disc=" << x.green_discount_bps
    << " qty=" << r.quantity.value << " start=" << opt(r.start) << " end=" << opt(r.end)
    << " dur=" << opt(r.duration) << " win=[" << x.window_start.value << ',' << x.window_end.value << ')'
    << " chunk=" << r.min_chunk.value << " mindur=" << r.min_duration.value << ' '
    << to_string(r.time_in_force) << " exp=" << opt(r.expire_at) << (r.post_only ? " post_only" : "") << ' '
    << to_string(r.stp);
  const BidConstraints& c = r.constraints;
  if (x.is_buy()) {
    o << " c{tiers=";
    for (Tier t : c.tiers) o << to_string(t) << ',';
    o << " regions=";
    for (const auto& g : c.regions) o << g << ',';
    o << " nvl=" << c.nvlink << " fab=" << opt(c.min_fabric) << " gbps=" << opt(c.min_fabric_gbps)
      << " sla=" << opt(c.min_sla_pct_x1000) << " green=" << c.green_only << " pue=" << opt(c.max_pue_x1000)
      << " ren=" << opt(c.min_renewable_pct_x100) << " co2=" << opt(c.max_carbon_g_per_kwh_x100)
      << " single=" << c.single_pool << " intr=" << c.interruptible << '}';
  }
  o << " status=" << to_string(x.status);
  if (x.reason != Reason::none) o << '(' << to_string(x.reason) << ')';
  o << " bucket=" << to_string(x.bucket) << " prio=" << x.priority << " t=" << x.created_at.value << '/'
    << x.updated_at.value << " hash=" << x.body_hash;
  if (x.is_buy()) {
    o << " filled=" << x.filled.value << " rem=" << x.remaining.value;
  } else {
    o << " gs{total=" << x.total_gpu_seconds << " filled=" << x.filled_gpu_seconds
      << " lapsed=" << x.lapsed_gpu_seconds << " free=" << x.free_gpu_seconds
      << " cancelled=" << x.cancelled_gpu_seconds << "} free=" << steps_text(x.free);
  }
  o << '}';
  return o.str();
}

std::string to_string(const Lease& x) {
  std::ostringstream o;
  o << "lease{id=" << x.id.value << " trade=" << x.trade.value << " split_from=" << x.split_from.value
    << " buyer=" << x.buyer.value << " provider=" << x.provider.value << " pool=" << x.pool.value << ' '
    << x.market.value() << " buy=" << x.buy_order.value << " sell=" << x.sell_order.value
    << " qty=" << x.quantity.value << " [" << x.start.value << ',' << x.end.value << ") price=" << x.price.value
    << " list=" << x.list_price.value << " disc=" << x.green_discount_bps << " intr=" << x.interruptible
    << ' ' << to_string(x.status) << " preempted_at=" << opt(x.preempted_at) << " ends_at=" << opt(x.ends_at)
    << " billed=" << x.billed << " owed=" << x.owed << " bucket=" << to_string(x.bucket)
    << " ended=" << x.ended << " ask{[" << x.ask_window_start.value << ',' << x.ask_window_end.value
    << ") list=" << x.ask_list_price.value << " chunk=" << x.ask_min_chunk.value
    << " min_duration=" << x.ask_min_duration.value << " withdrawn=" << x.ask_withdrawn << "}}";
  return o.str();
}

std::string to_string(const Trade& x) {
  std::ostringstream o;
  o << "trade{id=" << x.id.value << ' ' << x.market.value() << ' ' << to_string(x.bucket) << " t=" << x.time.value
    << " buy=" << x.buy_order.value << " sell=" << x.sell_order.value << " buyer=" << x.buyer.value
    << " seller=" << x.seller.value << " pool=" << x.pool.value << " lease=" << x.lease.value
    << " qty=" << x.quantity.value << " [" << x.start.value << ',' << x.end.value << ") price=" << x.price.value
    << " list=" << x.list_price.value << " disc=" << x.green_discount_bps << ' ' << to_string(x.tier) << ' '
    << x.region << ' ' << to_string(x.green_tier) << (x.preemption ? " preemption" : "")
    << " preempted=" << x.preempted_lease.value << " taker=" << to_string(x.taker) << '}';
  return o.str();
}

std::string to_string(const Pool& x) {
  std::ostringstream o;
  const PoolSpec& s = x.spec;
  o << "pool{id=" << x.id.value << " provider=" << x.provider.value << ' ' << s.market.value() << ' ' << s.region
    << ' ' << to_string(s.tier) << ' ' << s.gpus_per_node << 'x' << s.nodes << " nvl=" << s.nvlink << ' '
    << to_string(s.fabric) << '/' << s.fabric_gbps << " sla=" << s.sla_pct_x1000
    << " pue=" << s.energy.pue_x1000 << " ren=" << s.energy.renewable_pct_x100
    << " co2=" << s.energy.carbon_g_per_kwh_x100 << " fees=" << s.egress_per_gb << '/' << s.storage_per_gb_month
    << '/' << s.ip_per_month << " verified=" << x.verified << " evidence=" << x.evidence
    << " until=" << x.verified_until.value << ' ' << to_string(x.green_tier) << '/' << x.green_discount_bps
    << (x.retired ? " retired" : "") << " t=" << x.created_at.value << '/' << x.updated_at.value << '}';
  return o.str();
}

std::string to_string(const Event& e) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, OrderAccepted>) {
          return "OrderAccepted " + to_string(v.order);
        } else if constexpr (std::is_same_v<T, OrderRejected>) {
          return "OrderRejected " + to_string(v.order);
        } else if constexpr (std::is_same_v<T, OrderUpdated>) {
          return "OrderUpdated " + to_string(v.order);
        } else if constexpr (std::is_same_v<T, OrderDone>) {
          return "OrderDone " + to_string(v.order);
        } else if constexpr (std::is_same_v<T, OrderDuplicate>) {
          return "OrderDuplicate " + to_string(v.order);
        } else if constexpr (std::is_same_v<T, TradeEvent>) {
          return "Trade " + to_string(v.trade);
        } else if constexpr (std::is_same_v<T, LeaseChanged>) {
          return "LeaseChanged " + to_string(v.lease);
        } else if constexpr (std::is_same_v<T, LeasePreempted>) {
          return "LeasePreempted{lease=" + std::to_string(v.lease.value) + " buyer=" +
                 std::to_string(v.buyer.value) + " qty=" + std::to_string(v.quantity.value) +
                 " at=" + std::to_string(v.preempted_at.value) + " ends=" + std::to_string(v.ends_at.value) +
                 " by_trade=" + std::to_string(v.by_trade.value) + "}";
        } else if constexpr (std::is_same_v<T, BookDelta>) {
          std::string s = "BookDelta{" + std::string(v.market.value()) + ' ' + to_string(v.bucket) +
                          " seq=" + std::to_string(v.sequence) + " changes=";
          for (const LevelChange& c : v.changes) {
            s += std::string(to_string(c.side)) + '@' + std::to_string(c.price.value) + '=' +
                 std::to_string(c.quantity.value) + ' ';
          }
          return s + "constrained=" + std::to_string(v.constrained_bids.orders) + '/' +
                 std::to_string(v.constrained_bids.gpus.value) + '}';
        } else if constexpr (std::is_same_v<T, PoolChanged>) {
          return "PoolChanged " + to_string(v.pool);
        } else if constexpr (std::is_same_v<T, MarketHaltChanged>) {
          return "MarketHaltChanged{" + std::string(v.market.value()) + (v.halted ? " halted}" : " resumed}");
        } else if constexpr (std::is_same_v<T, LimitsChanged>) {
          return "LimitsChanged{acct=" + std::to_string(v.account.value) +
                 " gpus=" + std::to_string(v.limits.max_open_gpus.value) +
                 " notional=" + std::to_string(v.limits.max_open_notional) +
                 " orders=" + std::to_string(v.limits.max_open_orders) + '}';
        } else if constexpr (std::is_same_v<T, GreenPolicyChanged>) {
          return "GreenPolicyChanged{rules=" + std::to_string(v.policy.rules.size()) + '}';
        } else {
          static_assert(std::is_same_v<T, CommandRejected>);
          return "CommandRejected{seq=" + std::to_string(v.seq) + ' ' + std::string(to_string(v.reason)) +
                 " subject=" + std::to_string(v.subject) + '}';
        }
      },
      e);
}

}  // namespace gpuex::matching
