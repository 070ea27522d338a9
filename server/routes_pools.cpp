// Pools: a provider's inventory. Register, read with capacity, resize, retire; admins verify energy.
#include <boost/json.hpp>

#include <algorithm>
#include <vector>

#include "server/decimal.hpp"
#include "server/json_fields.hpp"
#include "server/routes.hpp"
#include "server/rfc3339.hpp"
#include "server/wire.hpp"

namespace gpuex {

using http::bhttp::verb;
using namespace matching;
namespace json = boost::json;

namespace {

constexpr const char* kOwnPools = "SELECT id FROM pools WHERE provider_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3";

// How far ahead a pool's schedule looks, and how many pieces it shows at most.
constexpr Seconds kScheduleHorizon{5 * 366 * 86400};
constexpr std::size_t kSchedulePieces = 200;

// The pool's capacity from now on as pieces [from, to) of constant leased (reserved or running leases),
// offered (free capacity of open asks) and free GPUs, up to the end of its last commitment; after the
// last piece every GPU is free. At most kSchedulePieces, the nearest first (`schedule_truncated` says so).
void add_schedule(json::object& j, const PoolCapacity& cap, Seconds now) {
  std::vector<Seconds> bounds;
  for (const Steps* s : {&cap.leased, &cap.offered}) {
    for (const Step& p : s->pieces()) bounds.insert(bounds.end(), {p.from, p.to});
  }
  json::array schedule;
  bool truncated = false;
  if (!bounds.empty()) {
    bounds.push_back(now);
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    std::int64_t last_leased = -1, last_offered = -1;  // of the piece shown last
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
      const Seconds from = bounds[i];
      const std::int64_t leased = cap.leased.at(from), offered = cap.offered.at(from);
      if (leased == last_leased && offered == last_offered) {  // equal neighbours are one piece
        schedule.back().as_object()["to"] = wire::time_string(bounds[i + 1]);
        continue;
      }
      if (schedule.size() == kSchedulePieces) {
        truncated = true;
        break;
      }
      schedule.push_back(json::object{{"from", wire::time_string(from)},
                                      {"to", wire::time_string(bounds[i + 1])},
                                      {"leased_gpus", leased},
                                      {"offered_gpus", offered},
                                      {"free_gpus", cap.unallocated.at(from)}});
      last_leased = leased;
      last_offered = offered;
    }
  }
  j["schedule"] = std::move(schedule);
  j["schedule_truncated"] = truncated;
}

// The pool with its capacity now (GPUs held by leases, offered by open asks, and unallocated) and, when
// asked for, its schedule ahead (GET /v1/pools/{id}).
json::object pool_with_capacity(const Engine& engine, const Pool& pool, bool with_schedule) {
  const Seconds now = engine.now();
  auto j = wire::pool_json(pool, now);
  const Seconds until = with_schedule ? now + kScheduleHorizon : now + Seconds(1);
  if (auto cap = engine.pool_capacity(pool.id, now, until)) {
    j["leased_gpus"] = cap->leased.at(now);
    j["offered_gpus"] = cap->offered.at(now);
    j["free_gpus"] = cap->unallocated.at(now);
    if (with_schedule) add_schedule(j, *cap, now);
  }
  return j;
}

const PoolChanged* changed_pool(const EventSink& events) {
  for (const auto& e : events) {
    if (const auto* p = std::get_if<PoolChanged>(&e)) return p;
  }
  return nullptr;
}

// The answer to a pool command: the pool, or the engine's refusal (pool_busy, ...).
http::Response pool_answer(const EventSink& events, http::Status ok) {
  for (const auto& e : events) {
    if (const auto* r = std::get_if<CommandRejected>(&e)) {
      if (r->reason == Reason::not_found) return not_found("pool");
      return http::error_response(http::Status::unprocessable_entity, to_string(r->reason),
                                  r->reason == Reason::pool_busy
                                      ? "open asks or leases hold the pool's GPUs"
                                      : "refused: " + std::string(to_string(r->reason)));
    }
  }
  const auto* p = changed_pool(events);
  if (!p) return http::error_response(http::Status::conflict, "no_change", "the pool did not change");
  return http::json_response(ok, wire::pool_json(p->pool, p->pool.updated_at));
}

EngineRunner::Admit own_pool(PoolId id, AccountId account) {
  return [id, account](const Engine& engine) {
    const Pool* p = engine.pool(id);
    return p && p->provider == account && !p->retired;
  };
}

}  // namespace

void add_pool_routes(http::Router& router, Services& services) {
  const Scopes provide = static_cast<Scopes>(Scope::provide);

  router.add(verb::post, "/v1/pools", services.gate.scoped(provide, [&services](http::RequestContext& ctx,
                                                                              http::Respond respond) {
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<json::object>(body));
    PoolSpec spec = wire::read_pool_spec(fields);
    if (auto err = fields.finish()) return respond(std::move(*err));
    if (!services.markets.count(spec.market.value())) return respond(not_found("market", "market"));
    const std::size_t limit = services.max_pools_per_provider;
    run_command(
        services, ctx, AddPool{std::move(spec)},
        [provider = AccountId(ctx.principal->account_id), limit](const Engine& engine) {
          return engine.live_pools(provider) < limit;
        },
        [](const EventSink& events, Seq) { return pool_answer(events, http::Status::created); },
        [limit] {
          return http::error_response(http::Status::unprocessable_entity, "pool_limit",
                                      "a provider may have at most " + std::to_string(limit) +
                                          " pools that are not retired; retire one first");
        },
        std::move(respond));
  }));

  router.add(verb::get, "/v1/pools", services.gate.scoped(provide, [&services](http::RequestContext& ctx,
                                                                             http::Respond respond) {
    auto page = read_page(ctx);
    if (auto* err = std::get_if<http::Response>(&page)) return respond(std::move(*err));
    services.queries.submit(
        [&services, respond, account = ctx.principal->account_id, p = std::get<Page>(page)](store::PgConnection& db) {
          auto rows = db.exec(kOwnPools, {std::to_string(account), std::to_string(p.before), std::to_string(p.limit + 1)});
          std::vector<PoolId> ids;
          for (int i = 0; i < rows.rows() && i < p.limit; ++i) ids.emplace_back(rows.integer(i, 0));
          json::value next = rows.rows() > p.limit ? json::value(std::to_string(ids.back().value)) : json::value(nullptr);
          // Capacity is the engine's, answered once committed; the list of ids is the store's.
          answer_committed(services, [ids, next](const Engine& engine) {
            json::array pools;
            for (PoolId id : ids) {
              if (const Pool* pool = engine.pool(id)) pools.push_back(pool_with_capacity(engine, *pool, false));
            }
            return http::json_response(http::Status::ok, {{"pools", std::move(pools)}, {"next_cursor", next}});
          }, respond);
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));

  router.add(verb::get, "/v1/pools/{id}", services.gate.scoped(provide, [&services](http::RequestContext& ctx,
                                                                                  http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("pool"));
    answer_committed(services, [id = PoolId(*id), account = AccountId(ctx.principal->account_id)](const Engine& engine) {
      const Pool* pool = engine.pool(id);
      if (!pool || pool->provider != account) return not_found("pool");
      return http::json_response(http::Status::ok, pool_with_capacity(engine, *pool, true));
    }, respond);
  }));

  router.add(verb::patch, "/v1/pools/{id}", services.gate.scoped(provide, [&services](http::RequestContext& ctx,
                                                                                    http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("pool"));
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<json::object>(body));
    auto nodes = fields.integer("nodes", Need::required, 1, wire::kMaxNodes);
    if (auto err = fields.finish()) return respond(std::move(*err));
    AccountId account(ctx.principal->account_id);
    run_command(
        services, account, ResizePool{PoolId(*id), static_cast<std::int32_t>(*nodes)}, own_pool(PoolId(*id), account),
        [](const EventSink& events, Seq) { return pool_answer(events, http::Status::ok); },
        [] { return not_found("pool"); }, std::move(respond));
  }));

  router.add(verb::delete_, "/v1/pools/{id}", services.gate.scoped(provide, [&services](http::RequestContext& ctx,
                                                                                      http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("pool"));
    AccountId account(ctx.principal->account_id);
    run_command(
        services, account, RetirePool{PoolId(*id)}, own_pool(PoolId(*id), account),
        [](const EventSink& events, Seq) { return pool_answer(events, http::Status::ok); },
        [] { return not_found("pool"); }, std::move(respond));
  }));

  router.add(verb::post, "/v1/pools/{id}/verify", services.gate.scoped(static_cast<Scopes>(Scope::admin), [&services](
                                                                           http::RequestContext& ctx, http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("pool"));
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<json::object>(body));
    VerifyPool verify{PoolId(*id), fields.boolean("verified", Need::required).value_or(false), Seconds(0), {}};
    if (verify.verified) {
      if (auto t = fields.time("expires_at", Need::required)) verify.expires_at = Seconds(*t);
      if (auto e = fields.string("evidence", Need::required, 2000)) {
        if (e->find_first_not_of(" \t\r\n") == std::string::npos) {
          fields.fail("invalid_field", "evidence", "evidence must say what the verification rests on");
        }
        verify.evidence = *e;
      }
    }
    if (auto err = fields.finish()) return respond(std::move(*err));
    if (verify.verified && verify.expires_at.value <= services.runner.server_time()) {
      return respond(http::error_response(http::Status::bad_request, "invalid_field", "expires_at must be in the future",
                                          "expires_at"));
    }
    PoolId pool(*id);
    run_command(
        services, ctx, verify,
        [pool](const Engine& engine) {  // a retired pool is gone for every write (own_pool), verification too
          const Pool* p = engine.pool(pool);
          return p && !p->retired;
        },
        [](const EventSink& events, Seq) { return pool_answer(events, http::Status::ok); },
        [] { return not_found("pool"); }, std::move(respond));
  }));
}

}  // namespace gpuex
