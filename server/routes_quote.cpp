// POST /v1/quote: a dry run of a buy order through the engine's matching walk. Public, changes nothing;
// answers the fills the order would get now, each with its pool's public attributes, fees and all-in price.
#include <boost/json.hpp>

#include "matching/money.hpp"
#include "server/decimal.hpp"
#include "server/json_fields.hpp"
#include "server/routes.hpp"
#include "server/wire.hpp"

namespace gpuex {

using http::bhttp::verb;
using namespace matching;
namespace json = boost::json;

namespace {

constexpr std::int64_t kHoursPerMonth = 730;     // storage fees are per GB-month; a month is 730 hours
constexpr std::int64_t kMaxGbX1000 = 1'000'000'000;  // 1,000,000 GB, in thousandths

// The fee-bearing usage a quote prices beside the GPUs, per GPU: GB sent out per GPU-hour, GB stored.
struct Usage {
  std::int64_t egress_gb_x1000 = 0;
  std::int64_t storage_gb_x1000 = 0;
};

// price + egress GB x egress fee + storage GB x storage fee / 730, in micro-dollars per GPU-hour: exact
// in 128-bit integers over the common denominator 730 x 1000, rounded half to even once.
std::int64_t all_in_micros(Price price, const PoolSpec& pool, const Usage& usage) {
  const Int128 den = Int128(kHoursPerMonth) * 1000;
  const Int128 num = Int128(price.value) * den + Int128(usage.egress_gb_x1000) * pool.egress_per_gb * kHoursPerMonth +
                     Int128(usage.storage_gb_x1000) * pool.storage_per_gb_month;
  return static_cast<std::int64_t>(div_half_even(num, den));
}

// What anyone may know of a pool: where and what it is, its green standing (energy values only once
// verified, and only while the verification holds) and its fees.
json::object public_pool_json(const Pool& p, Seconds now) {
  const bool verified = p.verified_at(now);
  auto energy = [verified](std::int64_t v, int scale) {
    return verified ? json::value(format_fixed(v, scale, 0)) : json::value(nullptr);
  };
  return {
      {"id", std::to_string(p.id.value)},
      {"region", p.spec.region},
      {"tier", to_string(p.spec.tier)},
      {"nvlink", p.spec.nvlink},
      {"fabric", to_string(p.spec.fabric)},
      {"fabric_gbps", p.spec.fabric_gbps},
      {"sla_pct", format_fixed(p.spec.sla_pct_x1000, 3, 0)},
      {"green_tier", to_string(p.green_tier)},
      {"verified", verified},
      {"verified_until", verified ? json::value(wire::time_string(p.verified_until)) : json::value(nullptr)},
      {"pue", energy(p.spec.energy.pue_x1000, 3)},
      {"renewable_pct", energy(p.spec.energy.renewable_pct_x100, 2)},
      {"carbon_g_per_kwh", energy(p.spec.energy.carbon_g_per_kwh_x100, 2)},
      {"egress_usd_per_gb", format_usd(p.spec.egress_per_gb)},
      {"storage_usd_per_gb_month", format_usd(p.spec.storage_per_gb_month)},
      {"ip_usd_per_month", format_usd(p.spec.ip_per_month)},
  };
}

}  // namespace

void add_quote_routes(http::Router& router, Services& services) {
  router.add(verb::post, "/v1/quote", services.gate.open([&services](http::RequestContext& ctx, http::Respond respond) {
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    const auto& object = std::get<json::object>(body);
    JsonFields fields(object);
    // The POST /v1/orders body of a buy; a sell has nothing to quote.
    if (const auto* side = object.if_contains("side"); side && side->is_string() && side->as_string() == "sell") {
      fields.fail("invalid_field", "side", "a quote is for buy orders: side must be buy");
    }
    OrderRequest request = wire::read_order_request(fields);
    Usage usage;
    if (auto v = fields.measure("egress_gb_per_gpu_hour", Need::optional, 3, 0, kMaxGbX1000)) usage.egress_gb_x1000 = *v;
    if (auto v = fields.measure("storage_gb", Need::optional, 3, 0, kMaxGbX1000)) usage.storage_gb_x1000 = *v;
    if (auto err = fields.finish()) return respond(std::move(*err));
    auto market = services.markets.find(request.market.value());
    if (market == services.markets.end()) return respond(not_found("market", "market"));
    const Price tick = market->second.tick;

    // Only the engine thread may look at the books, and a quote shows committed state only (DESIGN.md §2:
    // what anyone saw is never lost in a crash): it is answered once what the engine had applied committed.
    answer_committed(services, [request = std::move(request), usage, tick](const Engine& engine) -> http::Response {
      // The rules a placement checks before matching, in its order (engine.hpp), so a quote that could
      // never be placed says why instead of quoting nothing.
      if (engine.halted(request.market)) {
        return rule_broken(to_string(Reason::market_halted));
      }
      if (request.price.value % tick.value != 0) {
        return rule_broken(to_string(Reason::off_tick), "price must be a multiple of the tick " + format_price(tick.value));
      }
      if (request.quantity.value % request.min_chunk.value != 0) {
        return rule_broken(to_string(Reason::quantity_not_multiple_of_chunk));
      }
      if (request.start && *request.start < engine.now()) {
        return rule_broken(to_string(Reason::window_in_past));
      }
      const Seconds now = engine.now();
      json::array fills;
      std::int64_t filled = 0;
      // No account: a quote applies no self-trade prevention and no exposure limits.
      for (const QuoteFill& f : engine.quote(request, AccountId(0))) {
        const Pool* pool = engine.pool(f.pool);
        if (!pool) continue;  // cannot happen: a fill comes from a pool's ask or lease
        filled += f.quantity.value;
        fills.push_back(json::object{
            {"pool", public_pool_json(*pool, now)},
            {"price", wire::price_string(f.price)},
            {"list_price", wire::price_string(f.list_price)},
            {"green_discount_bps", f.green_discount_bps},
            {"quantity", f.quantity.value},
            {"start", wire::time_string(f.start)},
            {"end", wire::time_string(f.end)},
            {"preemption", f.preemption},
            {"all_in_usd_per_gpu_hour", format_price(all_in_micros(f.price, pool->spec, usage))},
        });
      }
      return http::json_response(http::Status::ok,
                                  {{"market", request.market.value()},
                                   {"as_of", wire::time_string(now)},
                                   {"quantity", request.quantity.value},
                                   {"filled_quantity", filled},
                                   {"egress_gb_per_gpu_hour", format_fixed(usage.egress_gb_x1000, 3, 0)},
                                   {"storage_gb", format_fixed(usage.storage_gb_x1000, 3, 0)},
                                   {"fills", std::move(fills)}});
    }, std::move(respond));
  }));
}

}  // namespace gpuex
