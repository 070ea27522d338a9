// The HTTP routes of gpuexd, grouped by area; each group adds itself to the router.
#pragma once

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <variant>

#include "server/auth.hpp"
#include "server/book_views.hpp"
#include "server/engine_runner.hpp"
#include "server/gate.hpp"
#include "server/metrics.hpp"
#include "server/router.hpp"
#include "server/store/health_monitor.hpp"
#include "server/store/query_pool.hpp"
#include "server/ws_hub.hpp"

namespace gpuex {

// What route handlers may use. Owned by the App; outlives every request.
struct Services {
  store::HealthMonitor& health;
  store::QueryPool& queries;
  Metrics& metrics;
  KeyStore& keys;
  Gate& gate;
  EngineRunner& runner;
  store::Writer& writer;
  BookViews& views;
  ws::Hub& hub;
  MarketTable markets;
  bool test_clock = false;
  std::size_t max_pools_per_provider = 1'000;  // not retired
};

// Builds the response to a command from its events (a pure function of them).
using CommandAnswer = std::function<http::Response(const matching::EventSink&, matching::Seq)>;

// Runs a command through the engine and answers after commit: `answer` builds the response from
// the command's events; `refused` answers when `admit` said no; a batch that did not commit is 503.
void run_command(Services& services, matching::AccountId account, matching::CommandBody body,
                 EngineRunner::Admit admit, CommandAnswer answer, std::function<http::Response()> refused,
                 http::Respond respond);
// The same for a POST that honours an Idempotency-Key header (API.md): the first answer to a key is
// stored with the command, in its transaction, and replayed to a repeat of the same request; the key
// with another request is 422 idempotency_conflict.
void run_command(Services& services, const http::RequestContext& ctx, matching::CommandBody body,
                 EngineRunner::Admit admit, CommandAnswer answer, std::function<http::Response()> refused,
                 http::Respond respond);

// Idempotency-Key (API.md): the header's key with a hash of the request it came with.
struct IdempotencyKey {
  std::string key;
  std::string request_sha256;  // as a bytea literal: of the method, the target and the body's canonical_json
  std::string raw_sha256;      // the same with the body's bytes as sent (how servers before kept it)
};
// Nothing without the header, the key, or a 400 for a malformed one.
std::variant<std::optional<IdempotencyKey>, http::Response> read_idempotency_key(const http::RequestContext& ctx);
// The answer kept for `key` of `account`: its replay, a 422 when the key came with another request, or
// nothing when the key is new.
std::optional<http::Response> stored_answer(store::PgConnection& db, std::int64_t account, const IdempotencyKey& key);
// Keeps the first answer to `key` (call inside the transaction that did the work).
void store_answer(store::PgConnection& db, std::int64_t account, const IdempotencyKey& key, unsigned status,
                  const std::string& body);

// Answers from the engine's state, once everything that state holds has committed (a 503 if it did
// not): what a client reads never shows a change the store may still lose.
void answer_committed(Services& services, std::function<http::Response(const matching::Engine&)> build,
                      http::Respond respond);

// Common answers.
http::Response not_found(std::string_view what, std::string_view field = {});
http::Response store_unavailable_response();
// A 422 for a rule of the market (API.md): `code` with the field at fault and a sentence (the rule's
// own unless `message` says more).
boost::json::object rule_error(std::string_view code, std::string message = {});
http::Response rule_broken(std::string_view code, std::string message = {});
// A positive id in a path segment, or nullopt.
std::optional<std::int64_t> path_id(const http::RequestContext& ctx, std::string_view name);
// Reads `limit` (default 100, at most 1000) and `cursor` (an id) of a list request.
struct Page {
  std::int64_t limit = 100;
  std::int64_t before = std::numeric_limits<std::int64_t>::max();
};
std::variant<Page, http::Response> read_page(const http::RequestContext& ctx);
// {"<key>": [documents], "next_cursor": ...} from rows of (document JSON, id), fetched with limit + 1
// to tell whether another page follows.
boost::json::object page_json(const store::PgResult& rows, const Page& page, std::string_view key);
// One query-string parameter, if present.
std::optional<std::string> query_param(const http::RequestContext& ctx, std::string_view name);

// /healthz, /readyz, /metrics.
void add_system_routes(http::Router& router, Services& services);
// /v1/markets.
void add_market_routes(http::Router& router, Services& services);
// /v1/accounts, /v1/keys (admin).
void add_account_routes(http::Router& router, Services& services);
// /v1/pools.
void add_pool_routes(http::Router& router, Services& services);
// /v1/orders, /v1/fills.
void add_order_routes(http::Router& router, Services& services);
// /v1/leases.
void add_lease_routes(http::Router& router, Services& services);
// POST /v1/quote: a dry run of a buy order (public).
void add_quote_routes(http::Router& router, Services& services);
// Public price discovery: /v1/markets/{m}/trades, /candles, /forward-curve, /stats; /v1/index/{m}.
void add_analytics_routes(http::Router& router, Services& services);
// The dashboard: the files of `web_root` at / and the charting library from `web_vendor` (both
// read once, at start).
void add_web_routes(http::Router& router, Services& services, const std::string& web_root,
                    const std::string& web_vendor);
// Halt/resume, limits, state digest, test clock.
void add_admin_routes(http::Router& router, Services& services);

}  // namespace gpuex
