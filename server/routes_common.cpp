// Helpers shared by the routes: running a command through the engine, ids, pages, query strings.
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <charconv>

#include "server/json_fields.hpp"
#include "server/routes.hpp"
#include "server/sha256.hpp"

namespace gpuex {

http::Response not_found(std::string_view what, std::string_view field) {
  return http::error_response(http::Status::not_found, "not_found", "no such " + std::string(what), field);
}

void answer_committed(Services& services, std::function<http::Response(const matching::Engine&)> build,
                      http::Respond respond) {
  services.runner.read_committed([build = std::move(build), respond](const matching::Engine& engine) {
    return [res = std::make_shared<http::Response>(build(engine)), respond](bool committed) {
      respond(committed ? std::move(*res) : store_unavailable_response());
    };
  });
}

http::Response store_unavailable_response() {
  return http::error_response(http::Status::service_unavailable, "store_unavailable",
                              "the exchange cannot store writes right now; nothing was done, retry shortly");
}

namespace {

// The field at fault and a sentence for each 422 rule of the market (API.md error codes).
struct RuleText {
  std::string_view code, field, message;
};
constexpr RuleText kRules[] = {
    {"insufficient_pool_capacity", "quantity", "the pool has too few free GPUs over the ask's window for this quantity"},
    {"window_in_past", "start", "the window starts in the past"},
    {"quantity_not_multiple_of_chunk", "quantity", "quantity must be a multiple of min_chunk"},
    {"exposure_limit", "", "the order would take the account over its exposure limits"},
    {"market_halted", "market", "the market is halted"},
    {"off_tick", "price", "price must be a multiple of the market's tick"},
    // an amend's (docs/market-rules.md "Amend")
    {"invalid_amend", "quantity",
     "quantity may only go down: a buy's must stay above what is filled; a sell's cut must be free over the rest of its "
     "window and leave a piece it can still sell (to end an order, cancel it)"},
    {"would_take", "price", "a post_only order's new price would trade at once"},
};

}  // namespace

boost::json::object rule_error(std::string_view code, std::string message) {
  boost::json::object error{{"code", code}};
  for (const auto& rule : kRules) {
    if (rule.code != code) continue;
    if (!rule.field.empty()) error["field"] = rule.field;
    if (message.empty()) message = rule.message;
  }
  error["message"] = message.empty() ? "the order breaks the market rule " + std::string(code) : message;
  return error;
}

http::Response rule_broken(std::string_view code, std::string message) {
  return http::json_response(http::Status::unprocessable_entity, {{"error", rule_error(code, std::move(message))}});
}

namespace {

// $4: the request's hash as servers before the canonical form kept it (its bytes as sent), so that a retry of a
// request first made before an upgrade is still the same request.
constexpr const char* kFindKey =
    "SELECT request_sha256 IN ($3::bytea, $4::bytea), status, body FROM idempotency_keys WHERE account_id = $1 AND key = $2";
constexpr const char* kInsertKey =
    "INSERT INTO idempotency_keys (account_id, key, request_sha256, status, body) VALUES ($1, $2, $3::bytea, $4, $5)";

// A repeat gets the first answer (API.md: "returns the original (200) and creates nothing"): what was
// created then (201) is 200 now; any other status as it was.
http::Response replay(const EngineRunner::Answer& answer) {
  const auto status = answer.status == 201 ? http::Status::ok : static_cast<http::Status>(answer.status);
  http::Response res{status, 11};
  res.set(http::bhttp::field::content_type, "application/json");
  res.set("Idempotent-Replayed", "true");
  res.body() = answer.body;
  res.prepare_payload();
  return res;
}

http::Response key_conflict() {
  return http::error_response(http::Status::unprocessable_entity, "idempotency_conflict",
                              "this Idempotency-Key was used for a different request", "Idempotency-Key");
}

void submit_command(Services& services, matching::AccountId account, matching::CommandBody body,
                    EngineRunner::Admit admit, CommandAnswer answer, std::function<http::Response()> refused,
                    http::Respond respond, std::optional<EngineRunner::Idempotency> idempotency) {
  if (!services.runner.accepting()) return respond(store_unavailable_response());
  services.runner.submit(
      account, std::move(body), std::move(admit),
      [answer = std::move(answer), refused = std::move(refused), respond](const EngineRunner::Result& r) {
        using O = EngineRunner::Outcome;
        switch (r.outcome) {
          case O::committed: return respond(answer(*r.events, r.seq));
          case O::refused: return respond(refused());
          case O::store_unavailable: return respond(store_unavailable_response());
          case O::replayed: return respond(replay(*r.stored));
          case O::key_conflict: return respond(key_conflict());
          case O::key_in_flight:
            return respond(http::error_response(http::Status::conflict, "idempotency_in_progress",
                                                "a request with this Idempotency-Key is still being processed",
                                                "Idempotency-Key"));
          case O::stale_check: {
            auto res = http::error_response(http::Status::service_unavailable, "not_ready", "the exchange is busy; retry");
            res.set(http::bhttp::field::retry_after, "1");
            return respond(std::move(res));
          }
        }
      },
      std::move(idempotency));
}

bool is_key(std::string_view key) {
  if (key.empty() || key.size() > 64) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

void run_command(Services& services, matching::AccountId account, matching::CommandBody body, EngineRunner::Admit admit,
                 CommandAnswer answer, std::function<http::Response()> refused, http::Respond respond) {
  submit_command(services, account, std::move(body), std::move(admit), std::move(answer), std::move(refused),
                 std::move(respond), std::nullopt);
}

void run_command(Services& services, const http::RequestContext& ctx, matching::CommandBody body,
                 EngineRunner::Admit admit, CommandAnswer answer, std::function<http::Response()> refused,
                 http::Respond respond) {
  matching::AccountId account(ctx.principal->account_id);
  auto read = read_idempotency_key(ctx);
  if (auto* bad = std::get_if<http::Response>(&read)) return respond(std::move(*bad));
  auto idem = std::get<std::optional<IdempotencyKey>>(std::move(read));
  if (!idem) {
    return run_command(services, account, std::move(body), std::move(admit), std::move(answer), std::move(refused),
                       std::move(respond));
  }
  auto checked_at = std::chrono::steady_clock::now();
  services.queries.submit(
      [&services, account, idem = std::move(*idem), checked_at, body = std::move(body), admit = std::move(admit),
       answer = std::move(answer), refused = std::move(refused), respond](store::PgConnection& db) mutable {
        if (auto stored = stored_answer(db, account.value, idem)) return respond(std::move(*stored));
        auto keep_answer = [answer](const matching::EventSink& events, matching::Seq seq) {
          auto res = answer(events, seq);
          return EngineRunner::Answer{res.result_int(), res.body()};
        };
        submit_command(services, account, std::move(body), std::move(admit), std::move(answer), std::move(refused),
                       std::move(respond),
                       EngineRunner::Idempotency{idem.key, idem.request_sha256, checked_at, std::move(keep_answer)});
      },
      [respond](const std::string&) { respond(store_unavailable_response()); });
}

std::variant<std::optional<IdempotencyKey>, http::Response> read_idempotency_key(const http::RequestContext& ctx) {
  auto header = ctx.request.find("Idempotency-Key");
  if (header == ctx.request.end()) return std::optional<IdempotencyKey>();
  std::string key(header->value());
  if (!is_key(key)) {
    return http::error_response(http::Status::bad_request, "invalid_field",
                                "Idempotency-Key must be 1 to 64 of A-Z a-z 0-9 - _ . :", "Idempotency-Key");
  }
  // The same key with the same method, path and body is the same request; a JSON body whatever its spacing and
  // key order (canonical_json), its values as sent. (A client_order_id repeat is judged on the order as read,
  // where "1.4" is "1.40"; these routes' bodies have no one reading to compare.)
  const std::string head = std::string(ctx.request.method_string()) + " " + std::string(ctx.request.target()) + "\n";
  boost::system::error_code ec;
  const boost::json::value body = boost::json::parse(ctx.request.body(), ec, {}, body_parse_options());
  std::string raw = sha256_bytea(head + ctx.request.body());
  std::string hash = ec ? raw : sha256_bytea(head + canonical_json(body));
  return std::optional<IdempotencyKey>(IdempotencyKey{std::move(key), std::move(hash), std::move(raw)});
}

std::optional<http::Response> stored_answer(store::PgConnection& db, std::int64_t account, const IdempotencyKey& key) {
  auto row = db.exec(kFindKey, {std::to_string(account), key.key, key.request_sha256, key.raw_sha256});
  if (row.rows() == 0) return std::nullopt;
  if (row.text(0, 0) != "t") return key_conflict();
  return replay({static_cast<unsigned>(row.integer(0, 1)), std::string(row.text(0, 2))});
}

void store_answer(store::PgConnection& db, std::int64_t account, const IdempotencyKey& key, unsigned status,
                  const std::string& body) {
  db.exec(kInsertKey, {std::to_string(account), key.key, key.request_sha256, std::to_string(status), body});
}

std::optional<std::int64_t> path_id(const http::RequestContext& ctx, std::string_view name) {
  auto it = ctx.path_params.find(name);
  if (it == ctx.path_params.end()) return std::nullopt;
  std::int64_t v = 0;
  const auto& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

std::optional<std::string> query_param(const http::RequestContext& ctx, std::string_view name) {
  auto target = ctx.request.target();
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) return std::nullopt;
  for (auto param : parsed->params()) {
    if (param.key == name) return std::string(param.value);
  }
  return std::nullopt;
}

std::variant<Page, http::Response> read_page(const http::RequestContext& ctx) {
  Page page;
  if (auto limit = query_param(ctx, "limit")) {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(limit->data(), limit->data() + limit->size(), v);
    if (ec != std::errc() || ptr != limit->data() + limit->size() || v < 1 || v > 1000) {
      return http::error_response(http::Status::bad_request, "invalid_field", "limit must be 1 to 1000", "limit");
    }
    page.limit = v;
  }
  if (auto cursor = query_param(ctx, "cursor")) {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(cursor->data(), cursor->data() + cursor->size(), v);
    if (ec != std::errc() || ptr != cursor->data() + cursor->size() || v < 1) {
      return http::error_response(http::Status::bad_request, "invalid_field", "cursor is not one this server gave",
                                  "cursor");
    }
    page.before = v;
  }
  return page;
}

boost::json::object page_json(const store::PgResult& rows, const Page& page, std::string_view key) {
  boost::json::array items;
  for (int i = 0; i < rows.rows() && i < page.limit; ++i) items.push_back(boost::json::parse(rows.text(i, 0)));
  boost::json::value next = nullptr;
  if (rows.rows() > page.limit) next = boost::json::string(rows.text(static_cast<int>(page.limit) - 1, 1));
  return {{key, std::move(items)}, {"next_cursor", std::move(next)}};
}

}  // namespace gpuex
