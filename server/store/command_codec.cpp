// See command_codec.hpp. Orders and pools reuse the API's request codec (server/wire), so the log
// and the wire cannot drift apart.
#include "server/store/command_codec.hpp"

#include <boost/json.hpp>

#include "server/store/connection.hpp"
#include "server/store/json_read.hpp"
#include "server/wire.hpp"

namespace gpuex::store {

using namespace matching;
namespace json = boost::json;

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

constexpr std::string_view kWhat = "command log";

std::int64_t int_at(const json::object& o, std::string_view key) { return store::int_at(o, key, kWhat); }
std::string string_at(const json::object& o, std::string_view key) { return store::string_at(o, key, kWhat); }
bool bool_at(const json::object& o, std::string_view key) { return store::bool_at(o, key, kWhat); }

template <class T, class Read>
T read_with(const json::object& body, Read read) {
  return store::read_with<T>(body, read, kWhat);
}

}  // namespace

std::string_view command_kind(const CommandBody& body) {
  return std::visit(Overloaded{
                        [](const AddPool&) { return "add_pool"; },
                        [](const ResizePool&) { return "resize_pool"; },
                        [](const RetirePool&) { return "retire_pool"; },
                        [](const VerifyPool&) { return "verify_pool"; },
                        [](const PlaceOrder&) { return "place_order"; },
                        [](const Cancel&) { return "cancel"; },
                        [](const CancelAll&) { return "cancel_all"; },
                        [](const Amend&) { return "amend"; },
                        [](const ReleaseLease&) { return "release_lease"; },
                        [](const HaltMarket&) { return "halt_market"; },
                        [](const SetLimits&) { return "set_limits"; },
                        [](const SetGreenPolicy&) { return "set_green_policy"; },
                        [](const Tick&) { return "tick"; },
                    },
                    body);
}

json::object command_body_json(const CommandBody& body) {
  return std::visit(
      Overloaded{
          [](const AddPool& c) { return wire::pool_spec_body(c.spec); },
          [](const ResizePool& c) { return json::object{{"pool", c.pool.value}, {"nodes", c.nodes}}; },
          [](const RetirePool& c) { return json::object{{"pool", c.pool.value}}; },
          [](const VerifyPool& c) {
            return json::object{{"pool", c.pool.value}, {"verified", c.verified},
                                {"expires_at", c.expires_at.value}, {"evidence", c.evidence}};
          },
          [](const PlaceOrder& c) { return wire::order_request_body(c.order); },
          [](const Cancel& c) { return json::object{{"order", c.order.value}}; },
          [](const CancelAll& c) {
            return c.market ? json::object{{"market", c.market->value()}} : json::object{};
          },
          [](const Amend& c) {
            json::object o{{"order", c.order.value}};
            if (c.quantity) o["quantity"] = c.quantity->value;
            if (c.price) o["price"] = c.price->value;
            return o;
          },
          [](const ReleaseLease& c) { return json::object{{"lease", c.lease.value}}; },
          [](const HaltMarket& c) { return json::object{{"market", c.market.value()}, {"halted", c.halted}}; },
          [](const SetLimits& c) {
            return json::object{{"account", c.account.value},
                                {"max_open_gpus", c.limits.max_open_gpus.value},
                                {"max_open_notional", c.limits.max_open_notional},
                                {"max_open_orders", c.limits.max_open_orders}};
          },
          [](const SetGreenPolicy& c) {
            json::array rules;
            for (const auto& r : c.policy.rules) {
              rules.push_back(json::object{{"tier", static_cast<int>(r.tier)},
                                           {"max_pue_x1000", r.max_pue_x1000},
                                           {"min_renewable_pct_x100", r.min_renewable_pct_x100},
                                           {"max_carbon_g_per_kwh_x100", r.max_carbon_g_per_kwh_x100},
                                           {"discount_bps", r.discount_bps}});
            }
            return json::object{{"rules", std::move(rules)}};
          },
          [](const Tick&) { return json::object{}; },
      },
      body);
}

CommandBody command_body_from_json(std::string_view kind, const json::object& b) {
  auto i32 = [&](std::string_view key) { return static_cast<std::int32_t>(int_at(b, key)); };
  if (kind == "add_pool") return AddPool{read_with<PoolSpec>(b, wire::read_pool_spec)};
  if (kind == "place_order") return PlaceOrder{read_with<OrderRequest>(b, wire::read_order_request)};
  if (kind == "resize_pool") return ResizePool{PoolId(int_at(b, "pool")), i32("nodes")};
  if (kind == "retire_pool") return RetirePool{PoolId(int_at(b, "pool"))};
  if (kind == "verify_pool") {
    return VerifyPool{PoolId(int_at(b, "pool")), bool_at(b, "verified"), Seconds(int_at(b, "expires_at")),
                      string_at(b, "evidence")};
  }
  if (kind == "cancel") return Cancel{OrderId(int_at(b, "order"))};
  if (kind == "cancel_all") {
    CancelAll c;
    if (b.contains("market")) c.market = MarketId{string_at(b, "market")};
    return c;
  }
  if (kind == "amend") {
    Amend a{OrderId(int_at(b, "order")), std::nullopt, std::nullopt};
    if (b.contains("quantity")) a.quantity = Qty(int_at(b, "quantity"));
    if (b.contains("price")) a.price = Price(int_at(b, "price"));
    return a;
  }
  if (kind == "release_lease") return ReleaseLease{LeaseId(int_at(b, "lease"))};
  if (kind == "halt_market") return HaltMarket{MarketId{string_at(b, "market")}, bool_at(b, "halted")};
  if (kind == "set_limits") {
    return SetLimits{AccountId(int_at(b, "account")),
                     Limits{Qty(int_at(b, "max_open_gpus")), int_at(b, "max_open_notional"), int_at(b, "max_open_orders")}};
  }
  if (kind == "set_green_policy") {
    GreenPolicy policy;
    const auto* rules = b.if_contains("rules");
    if (!rules || !rules->is_array()) throw StoreError("command log: green policy without rules");
    for (const auto& r : rules->get_array()) {
      if (!r.is_object()) throw StoreError("command log: a green policy rule is not an object");
      const auto& o = r.get_object();
      policy.rules.push_back(GreenTierRule{static_cast<GreenTier>(int_at(o, "tier")),
                                           static_cast<std::int32_t>(int_at(o, "max_pue_x1000")),
                                           static_cast<std::int32_t>(int_at(o, "min_renewable_pct_x100")),
                                           static_cast<std::int32_t>(int_at(o, "max_carbon_g_per_kwh_x100")),
                                           static_cast<std::int32_t>(int_at(o, "discount_bps"))});
    }
    return SetGreenPolicy{std::move(policy)};
  }
  if (kind == "tick") return Tick{};
  throw StoreError("command log: unknown command kind '" + std::string(kind) + "'");
}

}  // namespace gpuex::store
