// Admin: halt and resume markets, exposure limits, the engine's state digest, the test clock.
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "server/decimal.hpp"
#include "server/json_fields.hpp"
#include "server/routes.hpp"
#include "server/wire.hpp"

namespace gpuex {

using http::bhttp::verb;
using namespace matching;
namespace json = boost::json;

void add_admin_routes(http::Router& router, Services& services) {
  const Scopes admin = static_cast<Scopes>(Scope::admin);

  for (bool halt : {true, false}) {
    router.add(verb::post, halt ? "/v1/markets/{m}/halt" : "/v1/markets/{m}/resume",
               services.gate.scoped(admin, [&services, halt](http::RequestContext& ctx, http::Respond respond) {
                 const auto& market = ctx.path_params.at("m");
                 if (!services.markets.count(market)) return respond(not_found("market"));
                 spdlog::info("admin: account {} {} market {}", ctx.principal->account_id, halt ? "halts" : "resumes", market);
                 run_command(
                     services, ctx, HaltMarket{MarketId{market}, halt}, nullptr,
                     [market, halt](const EventSink&, Seq) {
                       return http::json_response(http::Status::ok, {{"market", market}, {"halted", halt}});
                     },
                     [] { return not_found("market"); }, std::move(respond));
               }));
  }

  router.add(verb::put, "/v1/accounts/{id}/limits", services.gate.scoped(admin, [&services](http::RequestContext& ctx,
                                                                                           http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("account"));
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<json::object>(body));
    Limits limits;
    if (auto v = fields.integer("max_open_gpus", Need::required, 0, 100'000'000)) limits.max_open_gpus = Qty(*v);
    if (auto v = fields.decimal("max_open_notional", Need::required, 6, 0, 1'000'000'000'000'000'000)) limits.max_open_notional = *v;
    if (auto v = fields.integer("max_open_orders", Need::required, 0, 10'000'000)) limits.max_open_orders = *v;
    if (auto err = fields.finish()) return respond(std::move(*err));
    auto account = *id;
    services.queries.submit(
        [&services, respond, account, limits, by = ctx.principal->account_id](store::PgConnection& db) {
          if (db.exec("SELECT 1 FROM accounts WHERE id = $1::bigint", {std::to_string(account)}).rows() == 0) {
            return respond(not_found("account"));
          }
          spdlog::info("admin: account {} sets limits of account {}", by, account);
          run_command(
              services, AccountId(by), SetLimits{AccountId(account), limits}, nullptr,
              [account, limits](const EventSink&, Seq) {
                return http::json_response(http::Status::ok,
                                           {{"account_id", std::to_string(account)},
                                            {"max_open_gpus", limits.max_open_gpus.value},
                                            {"max_open_notional", format_usd(limits.max_open_notional)},
                                            {"max_open_orders", limits.max_open_orders}});
              },
              [] { return not_found("account"); }, respond);
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));

  router.add(verb::get, "/v1/admin/state-digest", services.gate.scoped(admin, [&services](http::RequestContext&,
                                                                                         http::Respond respond) {
    // The digest of committed state as of the engine's time now (a tick that changed nothing still moves
    // that time unlogged): after a clean stop, the one a restart recovers.
    answer_committed(services, [](const Engine& engine) {
      char hex[20];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(engine.digest()));
      return http::json_response(http::Status::ok, {{"digest", hex}, {"last_seq", engine.last_seq()},
                                                    {"engine_time", wire::time_string(engine.now())}});
    }, respond);
  }));

  // Without --test-clock the route does not exist: 404 for every caller.
  if (services.test_clock) {
    router.add(verb::post, "/v1/admin/clock", services.gate.scoped(admin, [&services](http::RequestContext& ctx,
                                                                                     http::Respond respond) {
      auto body = parse_json_body(ctx.request);
      if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
      JsonFields fields(std::get<json::object>(body));
      auto advance = fields.integer("advance_s", Need::required, 0, 10LL * 366 * 86400);
      if (auto err = fields.finish()) return respond(std::move(*err));
      services.runner.advance_clock(*advance);
      // A tick at the new time, so that what time did is committed before the answer.
      run_command(
          services, AccountId(ctx.principal->account_id), Tick{}, nullptr,
          [&services](const EventSink&, Seq) {
            return http::json_response(http::Status::ok, {{"server_time", wire::time_string(Seconds(services.runner.server_time()))}});
          },
          [] { return not_found("clock"); }, std::move(respond));
    }));
  }
}

}  // namespace gpuex
