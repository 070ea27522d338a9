// See wire.hpp.
#include "server/wire.hpp"

#include <array>
#include <charconv>

#include "matching/money.hpp"
#include "server/decimal.hpp"
#include "server/rfc3339.hpp"

namespace gpuex::wire {

using namespace matching;
namespace json = boost::json;

namespace {

template <class E, std::size_t N>
std::optional<E> enum_named(std::string_view name, const std::array<E, N>& all) {
  for (E e : all) {
    if (to_string(e) == name) return e;
  }
  return std::nullopt;
}

constexpr std::array kTiers{Tier::bare_metal, Tier::instance, Tier::spot};
constexpr std::array kFabrics{Fabric::ethernet, Fabric::roce, Fabric::infiniband};
constexpr std::array kTifs{TimeInForce::gtc, TimeInForce::gtd, TimeInForce::ioc, TimeInForce::fok};
constexpr std::array kStps{StpMode::cancel_newest, StpMode::cancel_oldest, StpMode::cancel_both};

bool is_region(std::string_view s) { return s.size() == 2 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z'; }

bool is_client_order_id(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

std::optional<std::int64_t> parse_positive_id(std::string_view text) {
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v <= 0) return std::nullopt;
  return v;
}

// GPU-seconds as GPU-hours, 6 decimals at most, rounded half to even.
std::string gpu_hours(std::int64_t gpu_seconds) {
  return format_fixed(static_cast<std::int64_t>(div_half_even(Int128(gpu_seconds) * 1'000'000, 3600)), 6, 1);
}

json::value optional_time(const std::optional<Seconds>& t) {
  return t ? json::value(time_string(*t)) : json::value(nullptr);
}

std::string measure(std::int64_t v, int scale) { return format_fixed(v, scale, 0); }

}  // namespace

std::string time_string(Seconds t) { return format_rfc3339(t.value); }
std::string price_string(Price p) { return format_price(p.value); }

std::optional<Bucket> parse_bucket(std::string_view text) {
  if (text == "spot") return Bucket::spot();
  int y = 0, m = 0;
  bool ok = text.size() == 7 && text[4] == '-' &&
            std::from_chars(text.data(), text.data() + 4, y).ptr == text.data() + 4 &&
            std::from_chars(text.data() + 5, text.data() + 7, m).ptr == text.data() + 7 && y >= 1970 && m >= 1 &&
            m <= 12;
  if (!ok) return std::nullopt;
  return Bucket{y * 100 + m};
}

json::array levels_json(const std::vector<Level>& levels) {
  json::array out;
  out.reserve(levels.size());
  for (const auto& l : levels) out.push_back(json::array{json::value(price_string(l.price)), json::value(l.quantity.value)});
  return out;
}

json::object constrained_json(const ConstrainedBids& constrained) {
  return {{"orders", constrained.orders}, {"gpus", constrained.gpus.value}};
}

OrderRequest read_order_request(JsonFields& f) {
  OrderRequest r;
  auto side = f.one_of("side", Need::required, {"buy", "sell"});
  r.side = side && *side == "sell" ? Side::sell : Side::buy;
  if (auto p = f.decimal("price", Need::required, 6, 1, kMaxPriceMicros)) r.price = Price(*p);
  if (auto q = f.integer("quantity", Need::required, 1, kMaxQuantity)) r.quantity = Qty(*q);
  if (auto c = f.integer("min_chunk", Need::optional, 1, kMaxQuantity)) r.min_chunk = Qty(*c);
  if (auto id = f.string("client_order_id", Need::optional, 64)) {
    if (is_client_order_id(*id)) {
      r.client_order_id = *id;
    } else {
      f.fail("invalid_field", "client_order_id", "client_order_id must be 1 to 64 of A-Z a-z 0-9 - _ . :");
    }
  }
  if (auto tif = f.one_of("time_in_force", Need::optional, {"gtc", "gtd", "ioc", "fok"})) {
    r.time_in_force = *enum_named(*tif, kTifs);
  }
  if (auto e = f.time("expire_at", Need::optional)) r.expire_at = Seconds(*e);
  r.post_only = f.boolean("post_only", Need::optional).value_or(false);
  if (auto stp = f.one_of("stp", Need::optional, {"cancel_newest", "cancel_oldest", "cancel_both"})) {
    r.stp = *enum_named(*stp, kStps);
  }
  if (auto s = f.time("start", r.side == Side::sell ? Need::required : Need::optional)) r.start = Seconds(*s);
  if (auto e = f.time("end", r.side == Side::sell ? Need::required : Need::optional)) r.end = Seconds(*e);

  if (r.side == Side::buy) {
    // A name no market has stays empty (the routes answer not_found): a client's names must not grow MarketId's
    // table.
    if (auto m = f.string("market", Need::required, MarketId::kMaxSize)) {
      r.market = MarketId::existing(*m).value_or(MarketId());
    }
    if (auto d = f.integer("duration", Need::optional, kMinWindowSeconds, kMaxWindowSeconds)) r.duration = Seconds(*d);
    auto& c = r.constraints;
    if (auto tiers = f.strings("tiers", Need::optional, 3, 16)) {
      for (const auto& t : *tiers) {
        auto tier = enum_named(t, kTiers);
        if (!tier) f.fail("invalid_field", "tiers", "tiers must hold bare_metal, instance or spot");
        else if (std::find(c.tiers.begin(), c.tiers.end(), *tier) == c.tiers.end()) c.tiers.push_back(*tier);
      }
    }
    if (auto regions = f.strings("regions", Need::optional, 50, 2)) {
      for (const auto& g : *regions) {
        if (!is_region(g)) f.fail("invalid_field", "regions", "regions must be ISO 3166 codes such as \"US\"");
        else if (std::find(c.regions.begin(), c.regions.end(), g) == c.regions.end()) c.regions.push_back(g);
      }
    }
    c.nvlink = f.boolean("nvlink", Need::optional).value_or(false);
    if (auto fab = f.one_of("min_fabric", Need::optional, {"ethernet", "roce", "infiniband"})) {
      c.min_fabric = enum_named(*fab, kFabrics);
    }
    if (auto g = f.integer("min_fabric_gbps", Need::optional, 0, 100'000)) c.min_fabric_gbps = static_cast<std::int32_t>(*g);
    if (auto s = f.measure("min_sla_pct", Need::optional, 3, 0, 100'000)) c.min_sla_pct_x1000 = static_cast<std::int32_t>(*s);
    c.green_only = f.boolean("green_only", Need::optional).value_or(false);
    if (auto p = f.measure("max_pue", Need::optional, 3, 1000, 10'000)) c.max_pue_x1000 = static_cast<std::int32_t>(*p);
    if (auto p = f.measure("min_renewable_pct", Need::optional, 2, 0, 10'000)) {
      c.min_renewable_pct_x100 = static_cast<std::int32_t>(*p);
    }
    if (auto p = f.measure("max_carbon_g_per_kwh", Need::optional, 2, 0, 500'000)) {
      c.max_carbon_g_per_kwh_x100 = static_cast<std::int32_t>(*p);
    }
    c.single_pool = f.boolean("single_pool", Need::optional).value_or(false);
    c.interruptible = f.boolean("interruptible", Need::optional).value_or(false);

    bool window = r.start || r.end;
    if (window && !(r.start && r.end)) f.fail("missing_field", r.start ? "end" : "start", "a window needs both start and end");
    if (window && r.duration) f.fail("invalid_field", "duration", "give either start and end, or duration, not both");
    if (!window && !r.duration && f.ok()) f.fail("missing_field", "duration", "a buy needs start and end, or duration");
    if (c.single_pool && r.time_in_force != TimeInForce::ioc && r.time_in_force != TimeInForce::fok) {
      f.fail("invalid_field", "single_pool", "single_pool orders must be ioc or fok");
    }
  } else {
    if (auto pool = f.string("pool_id", Need::required, 20)) {
      if (auto id = parse_positive_id(*pool)) r.pool = PoolId(*id);
      else f.fail("invalid_field", "pool_id", "pool_id must be a pool's id");
    }
    if (auto d = f.integer("min_duration", Need::optional, 0, kMaxWindowSeconds)) r.min_duration = Seconds(*d);
  }

  if (r.start && r.end) {
    if (*r.end <= *r.start) f.fail("invalid_field", "end", "end must be after start");
    else if ((*r.end - *r.start).value < kMinWindowSeconds) f.fail("invalid_field", "end", "a window must span at least " + std::to_string(kMinWindowSeconds) + " s");
    else if ((*r.end - *r.start).value > kMaxWindowSeconds) f.fail("invalid_field", "end", "a window may span at most two years");
  }
  if (r.time_in_force == TimeInForce::gtd && !r.expire_at) f.fail("missing_field", "expire_at", "gtd orders need expire_at");
  if (r.time_in_force != TimeInForce::gtd && r.expire_at) f.fail("invalid_field", "expire_at", "expire_at goes with time_in_force gtd");
  if (r.post_only && (r.time_in_force == TimeInForce::ioc || r.time_in_force == TimeInForce::fok)) {
    f.fail("invalid_field", "post_only", "post_only orders rest; they cannot be ioc or fok");
  }
  return r;
}

PoolSpec read_pool_spec(JsonFields& f) {
  PoolSpec p;
  if (auto m = f.string("market", Need::required, MarketId::kMaxSize)) {
    p.market = MarketId::existing(*m).value_or(MarketId());  // as an order's
  }
  if (auto r = f.string("region", Need::required, 2)) {
    if (is_region(*r)) p.region = *r;
    else f.fail("invalid_field", "region", "region must be an ISO 3166 code such as \"DE\"");
  }
  if (auto t = f.one_of("tier", Need::required, {"bare_metal", "instance", "spot"})) p.tier = *enum_named(*t, kTiers);
  if (auto g = f.integer("gpus_per_node", Need::required, 1, kMaxGpusPerNode)) p.gpus_per_node = static_cast<std::int32_t>(*g);
  if (auto n = f.integer("nodes", Need::required, 1, kMaxNodes)) p.nodes = static_cast<std::int32_t>(*n);
  p.nvlink = f.boolean("nvlink", Need::optional).value_or(false);
  if (auto fab = f.one_of("fabric", Need::optional, {"ethernet", "roce", "infiniband"})) p.fabric = *enum_named(*fab, kFabrics);
  if (auto g = f.integer("fabric_gbps", Need::optional, 0, 100'000)) p.fabric_gbps = static_cast<std::int32_t>(*g);
  if (auto s = f.measure("sla_pct", Need::optional, 3, 0, 100'000)) p.sla_pct_x1000 = static_cast<std::int32_t>(*s);
  if (auto v = f.measure("pue", Need::required, 3, 1000, 10'000)) p.energy.pue_x1000 = static_cast<std::int32_t>(*v);
  if (auto v = f.measure("renewable_pct", Need::required, 2, 0, 10'000)) p.energy.renewable_pct_x100 = static_cast<std::int32_t>(*v);
  if (auto v = f.measure("carbon_g_per_kwh", Need::required, 2, 0, 500'000)) {
    p.energy.carbon_g_per_kwh_x100 = static_cast<std::int32_t>(*v);
  }
  if (auto v = f.decimal("egress_usd_per_gb", Need::optional, 6, 0, 1'000'000'000)) p.egress_per_gb = *v;
  if (auto v = f.decimal("storage_usd_per_gb_month", Need::optional, 6, 0, 1'000'000'000)) p.storage_per_gb_month = *v;
  if (auto v = f.decimal("ip_usd_per_month", Need::optional, 6, 0, 1'000'000'000)) p.ip_per_month = *v;
  return p;
}

namespace {
json::object constraints_json(const BidConstraints& c) {
  json::object cj;
  if (!c.tiers.empty()) {
    json::array a;
    for (auto t : c.tiers) a.emplace_back(to_string(t));
    cj["tiers"] = std::move(a);
  }
  if (!c.regions.empty()) {
    json::array a;
    for (const auto& g : c.regions) a.emplace_back(g);
    cj["regions"] = std::move(a);
  }
  if (c.nvlink) cj["nvlink"] = true;
  if (c.min_fabric) cj["min_fabric"] = to_string(*c.min_fabric);
  if (c.min_fabric_gbps) cj["min_fabric_gbps"] = *c.min_fabric_gbps;
  if (c.min_sla_pct_x1000) cj["min_sla_pct"] = measure(*c.min_sla_pct_x1000, 3);
  if (c.green_only) cj["green_only"] = true;
  if (c.max_pue_x1000) cj["max_pue"] = measure(*c.max_pue_x1000, 3);
  if (c.min_renewable_pct_x100) cj["min_renewable_pct"] = measure(*c.min_renewable_pct_x100, 2);
  if (c.max_carbon_g_per_kwh_x100) cj["max_carbon_g_per_kwh"] = measure(*c.max_carbon_g_per_kwh_x100, 2);
  if (c.single_pool) cj["single_pool"] = true;
  if (c.interruptible) cj["interruptible"] = true;
  return cj;
}
}  // namespace

json::object order_request_body(const OrderRequest& r) {
  json::object j;
  j["side"] = to_string(r.side);
  j["price"] = price_string(r.price);
  j["quantity"] = r.quantity.value;
  j["min_chunk"] = r.min_chunk.value;
  if (!r.client_order_id.empty()) j["client_order_id"] = r.client_order_id;
  j["time_in_force"] = to_string(r.time_in_force);
  if (r.expire_at) j["expire_at"] = time_string(*r.expire_at);
  j["post_only"] = r.post_only;
  j["stp"] = to_string(r.stp);
  if (r.start) j["start"] = time_string(*r.start);
  if (r.end) j["end"] = time_string(*r.end);
  if (r.side == Side::buy) {
    j["market"] = r.market.value();
    if (r.duration) j["duration"] = r.duration->value;
    for (auto& kv : constraints_json(r.constraints)) j[kv.key()] = kv.value();
  } else {
    j["pool_id"] = std::to_string(r.pool.value);
    j["min_duration"] = r.min_duration.value;
  }
  return j;
}

json::object pool_spec_body(const PoolSpec& s) {
  return {
      {"market", s.market.value()},
      {"region", s.region},
      {"tier", to_string(s.tier)},
      {"gpus_per_node", s.gpus_per_node},
      {"nodes", s.nodes},
      {"nvlink", s.nvlink},
      {"fabric", to_string(s.fabric)},
      {"fabric_gbps", s.fabric_gbps},
      {"sla_pct", measure(s.sla_pct_x1000, 3)},
      {"pue", measure(s.energy.pue_x1000, 3)},
      {"renewable_pct", measure(s.energy.renewable_pct_x100, 2)},
      {"carbon_g_per_kwh", measure(s.energy.carbon_g_per_kwh_x100, 2)},
      {"egress_usd_per_gb", format_usd(s.egress_per_gb)},
      {"storage_usd_per_gb_month", format_usd(s.storage_per_gb_month)},
      {"ip_usd_per_month", format_usd(s.ip_per_month)},
  };
}

json::object order_json(const Order& o) {
  const auto& r = o.request;
  json::object j;
  j["id"] = std::to_string(o.id.value);
  j["client_order_id"] = r.client_order_id.empty() ? json::value(nullptr) : json::value(r.client_order_id);
  j["side"] = to_string(r.side);
  j["market"] = o.market.value();
  j["status"] = to_string(o.status);
  if (o.reason != Reason::none) j["reject_reason"] = to_string(o.reason);
  j["price"] = price_string(r.price);
  j["quantity"] = r.quantity.value;
  j["min_chunk"] = r.min_chunk.value;
  j["time_in_force"] = to_string(r.time_in_force);
  j["expire_at"] = optional_time(r.expire_at);
  j["post_only"] = r.post_only;
  j["stp"] = to_string(r.stp);
  j["bucket"] = to_string(o.bucket);
  if (o.is_buy()) {
    if (r.duration) {
      j["duration"] = r.duration->value;
    } else {
      j["start"] = optional_time(r.start);
      j["end"] = optional_time(r.end);
    }
    j["filled_quantity"] = o.filled.value;
    j["remaining_quantity"] = o.remaining.value;
    // The constraints as sent, beside the other request fields.
    for (auto& kv : constraints_json(r.constraints)) j[kv.key()] = kv.value();
  } else {
    j["pool_id"] = std::to_string(r.pool.value);
    j["effective_price"] = price_string(o.effective_price);
    j["green_discount_bps"] = o.green_discount_bps;
    j["start"] = time_string(o.window_start);
    j["end"] = time_string(o.window_end);
    j["requested_start"] = optional_time(r.start);
    j["min_duration"] = r.min_duration.value;
    j["filled_gpu_hours"] = gpu_hours(o.filled_gpu_seconds);
    j["remaining_gpu_hours"] = gpu_hours(o.free_gpu_seconds);
    j["lapsed_gpu_hours"] = gpu_hours(o.lapsed_gpu_seconds);
    j["cancelled_gpu_hours"] = gpu_hours(o.cancelled_gpu_seconds);
    json::array free;  // what it still offers: nothing once it has ended (the engine keeps the pieces before its end)
    if (o.is_open()) {
      for (const auto& step : o.free.pieces()) {
        free.push_back(json::array{json::value(time_string(step.from)), json::value(time_string(step.to)),
                                   json::value(step.gpus)});
      }
    }
    j["free"] = std::move(free);
  }
  j["created_at"] = time_string(o.created_at);
  j["updated_at"] = time_string(o.updated_at);
  return j;
}

json::object pool_json(const Pool& p, Seconds now) {
  // The pool as registered, then what the exchange knows of it.
  json::object j = pool_spec_body(p.spec);
  j["id"] = std::to_string(p.id.value);
  j["provider"] = std::to_string(p.provider.value);
  j["gpus"] = p.gpus().value;
  j["verified"] = p.verified_at(now);
  j["verified_until"] = p.verified ? json::value(time_string(p.verified_until)) : json::value(nullptr);
  j["evidence"] = p.verified ? json::value(p.evidence) : json::value(nullptr);
  j["green_tier"] = to_string(p.green_tier);
  j["green_discount_bps"] = p.green_discount_bps;
  j["retired"] = p.retired;
  j["created_at"] = time_string(p.created_at);
  j["updated_at"] = time_string(p.updated_at);
  return j;
}

json::object lease_json(const Lease& l, AccountId account) {
  return {
      {"id", std::to_string(l.id.value)},
      {"role", l.buyer == account ? "buyer" : "provider"},
      {"market", l.market.value()},
      {"pool_id", std::to_string(l.pool.value)},
      {"provider", std::to_string(l.provider.value)},
      {"trade_id", std::to_string(l.trade.value)},
      {"quantity", l.quantity.value},
      {"start", time_string(l.start)},
      {"end", time_string(l.end)},
      {"price", price_string(l.price)},
      {"list_price", price_string(l.list_price)},
      {"green_discount_bps", l.green_discount_bps},
      {"interruptible", l.interruptible},
      {"status", to_string(l.status)},
      {"preempted_at", optional_time(l.preempted_at)},
      {"ends_at", optional_time(l.ends_at)},
      {"billed_usd", format_usd(l.billed)},
      {"owed_usd", format_usd(l.owed)},
  };
}

json::object fill_json(const Trade& t, Side side) {
  return {
      {"trade_id", std::to_string(t.id.value)},
      {"order_id", std::to_string((side == Side::buy ? t.buy_order : t.sell_order).value)},
      {"lease_id", std::to_string(t.lease.value)},
      {"side", to_string(side)},
      {"market", t.market.value()},
      {"price", price_string(t.price)},
      {"list_price", price_string(t.list_price)},
      {"green_discount_bps", t.green_discount_bps},
      {"quantity", t.quantity.value},
      {"start", time_string(t.start)},
      {"end", time_string(t.end)},
      {"liquidity", t.taker == side ? "taker" : "maker"},
      {"preemption", t.preemption},
      {"time", time_string(t.time)},
  };
}

json::object print_json(const Trade& t) {
  return {
      {"trade_id", std::to_string(t.id.value)},
      {"time", time_string(t.time)},
      {"bucket", to_string(t.bucket)},
      {"price", price_string(t.price)},
      {"list_price", price_string(t.list_price)},
      {"green_discount_bps", t.green_discount_bps},
      {"quantity", t.quantity.value},
      {"start", time_string(t.start)},
      {"end", time_string(t.end)},
      {"gpu_hours", gpu_hours(t.gpu_seconds())},
      {"tier", to_string(t.tier)},
      {"region", t.region},
      {"green_tier", to_string(t.green_tier)},
      {"preemption", t.preemption},
  };
}

}  // namespace gpuex::wire
