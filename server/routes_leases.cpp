// Leases: the contracts trades create, as the buyer or the provider sees them; buyers release early.
#include <boost/json.hpp>

#include "server/decimal.hpp"
#include "server/json_fields.hpp"
#include "server/routes.hpp"
#include "server/wire.hpp"

namespace gpuex {

using http::bhttp::verb;
using namespace matching;
namespace json = boost::json;

namespace {
// The stored document is the buyer's view; a provider reading it sees role "provider".
constexpr const char* kListLeases = R"sql(
SELECT CASE WHEN buyer_id = $1 THEN lease ELSE jsonb_set(lease, '{role}', '"provider"') END::text, id
FROM leases WHERE (buyer_id = $1 OR provider_id = $1) AND id < $2 AND ($3::text IS NULL OR status = $3)
ORDER BY id DESC LIMIT $4)sql";
constexpr const char* kOneLease = R"sql(
SELECT CASE WHEN buyer_id = $2 THEN lease ELSE jsonb_set(lease, '{role}', '"provider"') END::text
FROM leases WHERE id = $1 AND (buyer_id = $2 OR provider_id = $2))sql";
}  // namespace

void add_lease_routes(http::Router& router, Services& services) {
  const Scopes read = static_cast<Scopes>(Scope::read);

  router.add(verb::get, "/v1/leases", services.gate.scoped(read, [&services](http::RequestContext& ctx,
                                                                            http::Respond respond) {
    auto page = read_page(ctx);
    if (auto* err = std::get_if<http::Response>(&page)) return respond(std::move(*err));
    store::Param status;
    if (auto s = query_param(ctx, "status"); s && *s != "all") {  // all: every state, as GET /v1/orders says it
      if (*s != "reserved" && *s != "active" && *s != "completed" && *s != "preempted" && *s != "released") {
        return respond(http::error_response(http::Status::bad_request, "invalid_field",
                                            "status must be all, reserved, active, completed, preempted or released",
                                            "status"));
      }
      status = *s;
    }
    services.queries.submit(
        [respond, account = ctx.principal->account_id, p = std::get<Page>(page), status](store::PgConnection& db) {
          auto rows = db.exec(kListLeases, {std::to_string(account), std::to_string(p.before), status,
                                            std::to_string(p.limit + 1)});
          respond(http::json_response(http::Status::ok, page_json(rows, p, "leases")));
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));

  router.add(verb::get, "/v1/leases/{id}", services.gate.scoped(read, [&services](http::RequestContext& ctx,
                                                                                 http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("lease"));
    services.queries.submit(
        [respond, id = *id, account = ctx.principal->account_id](store::PgConnection& db) {
          auto row = db.exec(kOneLease, {std::to_string(id), std::to_string(account)});
          if (row.rows() == 0) return respond(not_found("lease"));
          respond(http::json_response(http::Status::ok, json::parse(row.text(0, 0))));
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));

  router.add(verb::post, "/v1/leases/{id}/release", services.gate.scoped(static_cast<Scopes>(Scope::trade), [&services](
                                                                             http::RequestContext& ctx, http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("lease"));
    AccountId account(ctx.principal->account_id);
    LeaseId lease(*id);
    run_command(
        services, ctx, ReleaseLease{lease},
        [lease, account](const Engine& engine) {
          const Lease* l = engine.lease(lease);
          return l && l->buyer == account;
        },
        [lease, account](const EventSink& events, Seq) {
          for (const auto& e : events) {
            if (const auto* r = std::get_if<CommandRejected>(&e)) {
              return http::error_response(http::Status::conflict, to_string(r->reason), "the lease cannot be released");
            }
          }
          for (auto it = events.rbegin(); it != events.rend(); ++it) {
            if (const auto* c = std::get_if<LeaseChanged>(&*it); c && c->lease.id == lease) {
              return http::json_response(http::Status::ok, wire::lease_json(c->lease, account));
            }
          }
          return http::error_response(http::Status::conflict, "lease_not_open", "the lease has ended");
        },
        [] { return not_found("lease (or it has ended)"); }, std::move(respond));
  }));
}

}  // namespace gpuex
