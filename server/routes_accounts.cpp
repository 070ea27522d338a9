// Admin: accounts and their API keys. A key is returned once, at creation; only its hash is kept.
#include <boost/json.hpp>
#include <spdlog/spdlog.h>

#include <charconv>

#include "server/json_fields.hpp"
#include "server/routes.hpp"

namespace gpuex {

using http::bhttp::verb;

namespace {

constexpr const char* kAccountExists = "SELECT 1 FROM accounts WHERE id = $1::bigint";

http::Response store_unavailable() {
  return http::error_response(http::Status::service_unavailable, "store_unavailable",
                              "PostgreSQL does not answer; nothing was changed");
}

// Reads {"scopes": ["read", "trade", ...]} into bits.
std::optional<Scopes> read_scopes(JsonFields& fields) {
  auto list = fields.strings("scopes", Need::required, 4, 16);
  if (!list) return std::nullopt;
  std::string joined;
  for (const auto& s : *list) joined += (joined.empty() ? "" : ",") + s;
  auto scopes = parse_scopes(joined);
  if (!scopes) fields.fail("invalid_field", "scopes", "scopes must be a non-empty list of read, trade, provide, admin");
  return scopes;
}

boost::json::object key_json(const NewKey& key, std::int64_t account_id, Scopes scopes) {
  boost::json::array scope_list;
  auto text = scopes_to_string(scopes);
  for (std::size_t i = 0; i < text.size();) {
    auto comma = text.find(',', i);
    if (comma == std::string::npos) comma = text.size();
    scope_list.emplace_back(text.substr(i, comma - i));
    i = comma + 1;
  }
  return {{"id", key.id}, {"account_id", std::to_string(account_id)}, {"api_key", key.key}, {"scopes", scope_list}};
}

// The account or key a POST made: the answer, and what a repeat with the same Idempotency-Key gets
// (the same, without the key's secret: it is shown once and only its hash is kept).
struct Written {
  http::Response answer;
  boost::json::object repeat;
};

// Runs `write` in one transaction on a query connection. With an Idempotency-Key, the transaction
// first takes a lock on the key, answers a repeat from the kept answer, and otherwise keeps the new
// answer with what `write` wrote; an answer other than 201 rolls everything back.
void write_once(Services& services, const http::RequestContext& ctx,
                std::function<Written(store::PgConnection&)> write, http::Respond respond) {
  auto read = read_idempotency_key(ctx);
  if (auto* bad = std::get_if<http::Response>(&read)) return respond(std::move(*bad));
  auto idem = std::get<std::optional<IdempotencyKey>>(std::move(read));
  const std::int64_t admin = ctx.principal->account_id;
  services.queries.submit(
      [respond, admin, idem = std::move(idem), write = std::move(write)](store::PgConnection& db) {
        db.exec_script("BEGIN");
        try {
          if (idem) {
            db.exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", {std::to_string(admin) + ":" + idem->key});
            if (auto kept = stored_answer(db, admin, *idem)) {
              db.exec_script("ROLLBACK");
              return respond(std::move(*kept));
            }
          }
          Written w = write(db);
          if (w.answer.result() != http::Status::created) {
            db.exec_script("ROLLBACK");
            return respond(std::move(w.answer));
          }
          if (idem) store_answer(db, admin, *idem, w.answer.result_int(), boost::json::serialize(w.repeat));
          db.exec_script("COMMIT");
          respond(std::move(w.answer));
        } catch (...) {
          if (db.healthy()) db.exec_script("ROLLBACK");
          throw;
        }
      },
      [respond](const std::string&) { respond(store_unavailable()); });
}

std::optional<std::int64_t> parse_id(std::string_view text) {
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

void add_account_routes(http::Router& router, Services& services) {
  const Scopes admin = static_cast<Scopes>(Scope::admin);

  router.add(verb::post, "/v1/accounts", services.gate.scoped(admin, [&services](http::RequestContext& ctx,
                                                                                 http::Respond respond) {
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<boost::json::object>(body));
    auto name = fields.string("name", Need::required, 100);
    auto scopes = read_scopes(fields);
    if (name && name->empty()) fields.fail("invalid_field", "name", "name must not be empty");
    if (auto err = fields.finish()) return respond(std::move(*err));

    write_once(services, ctx, [name = *name, scopes = *scopes, by = ctx.principal->account_id](store::PgConnection& db) {
      auto [id, key] = insert_account(db, name, scopes);
      spdlog::info("admin: account {} created account {} ({}) with key {} [{}]", by, id, name, key.id,
                   scopes_to_string(scopes));
      // API.md: `api_key` is the key itself (shown once); `key` is its record without the secret.
      auto record = key_json(key, id, scopes);
      record.erase("api_key");
      boost::json::object answer{{"account", {{"id", std::to_string(id)}, {"name", name}}},
                                 {"api_key", key.key},
                                 {"key", std::move(record)}};
      auto repeat = answer;
      repeat["api_key"] = nullptr;
      return Written{http::json_response(http::Status::created, answer), std::move(repeat)};
    }, std::move(respond));
  }));

  router.add(verb::post, "/v1/accounts/{id}/keys", services.gate.scoped(admin, [&services](http::RequestContext& ctx,
                                                                                           http::Respond respond) {
    auto account = parse_id(ctx.path_params.at("id"));
    if (!account) return respond(http::error_response(http::Status::not_found, "not_found", "no such account"));
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<boost::json::object>(body));
    auto scopes = read_scopes(fields);
    if (auto err = fields.finish()) return respond(std::move(*err));

    write_once(services, ctx, [account = *account, scopes = *scopes](store::PgConnection& db) {
      if (db.exec(kAccountExists, {std::to_string(account)}).rows() == 0) {
        return Written{http::error_response(http::Status::not_found, "not_found", "no such account"), {}};
      }
      auto key = create_key(db, account, scopes);
      spdlog::info("admin: key {} issued to account {} [{}]", key.id, account, scopes_to_string(scopes));
      auto answer = key_json(key, account, scopes);
      auto repeat = answer;
      repeat["api_key"] = nullptr;
      return Written{http::json_response(http::Status::created, answer), std::move(repeat)};
    }, std::move(respond));
  }));

  router.add(verb::delete_, "/v1/keys/{key_id}", services.gate.scoped(admin, [&services](http::RequestContext& ctx,
                                                                                         http::Respond respond) {
    std::string key_id = ctx.path_params.at("key_id");
    services.queries.submit(
        [&services, respond, key_id](store::PgConnection& db) {
          auto revoked = revoke_key(db, key_id);
          if (!revoked) return respond(http::error_response(http::Status::not_found, "not_found", "no such key"));
          services.keys.revoke(key_id);  // after the commit: no request is let in by this key from now on
          spdlog::info("admin: key {} revoked", key_id);
          respond(http::json_response(http::Status::ok, {{"id", key_id},
                                                         {"account_id", revoked->account_id},
                                                         {"revoked_at", revoked->revoked_at}}));
        },
        [respond](const std::string&) { respond(store_unavailable()); });
  }));
}

}  // namespace gpuex
