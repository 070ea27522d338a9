// Malformed and hostile requests: each gets its 4xx and code, nothing is stored, the server goes on.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;

namespace {
struct Case {
  const char* what;
  std::string method;
  std::string path;
  std::string body;
  std::string key;  // which key: "buyer", "provider", "admin", "revoked", "none", or a literal header value
  unsigned status;
  std::string code;
};

std::string window(std::int64_t from_now, std::int64_t length) {
  auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return R"("start": ")" + gpuex::format_rfc3339(now + from_now) + R"(", "end": ")" +
         gpuex::format_rfc3339(now + from_now + length) + "\"";
}
}  // namespace

TEST_CASE("a table of malformed and hostile requests gets the expected status and code") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto admin = create_account(db.dsn(), "ops", "admin");
  auto provider = create_account(db.dsn(), "provider", "provide,read");
  auto buyer = create_account(db.dsn(), "buyer", "trade,read");
  auto rival = create_account(db.dsn(), "rival", "provide,trade,read");
  auto revoked = create_account(db.dsn(), "gone", "trade,read");
  Gpuexd server(db.dsn(), {"--key-rate", "10000", "--key-burst", "10000", "--ip-rate", "10000", "--ip-burst", "10000"}, false);
  HttpClient http(server.port());

  REQUIRE(http.request("DELETE", "/v1/keys/" + revoked.key_id, "", bearer(admin.api_key)).status == 200);
  auto new_pool = [&] {
    auto pool = http.request("POST", "/v1/pools",
                             R"({"market": "H100-SXM-80G", "region": "DE", "tier": "bare_metal", "gpus_per_node": 8,
                                 "nodes": 1, "pue": "1.2", "renewable_pct": 50, "carbon_g_per_kwh": 200})",
                             bearer(provider.api_key));
    REQUIRE(pool.status == 201);
    return std::string(pool.json().at("id").as_string());
  };
  const std::string pool_id = new_pool();
  const std::string retired_id = new_pool();
  REQUIRE(http.request("DELETE", "/v1/pools/" + retired_id, "", bearer(provider.api_key)).status == 200);
  const std::string buy = R"("side": "buy", "market": "H100-SXM-80G", )";
  const std::string sell = R"("side": "sell", "pool_id": ")" + pool_id + R"(", )";

  std::vector<Case> cases = {
      {"not JSON", "POST", "/v1/orders", "{side: buy", "buyer", 400, "malformed_json"},
      {"JSON array", "POST", "/v1/orders", "[1, 2]", "buyer", 400, "malformed_json"},
      {"empty body", "POST", "/v1/orders", "", "buyer", 400, "malformed_json"},
      {"nested too deep", "POST", "/v1/orders", std::string(100, '[') + std::string(100, ']'), "buyer", 400, "malformed_json"},
      {"price as a number", "POST", "/v1/orders", "{" + buy + R"("price": 2.05, "quantity": 1, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"negative price", "POST", "/v1/orders", "{" + buy + R"("price": "-2.05", "quantity": 1, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"zero price", "POST", "/v1/orders", "{" + buy + R"("price": "0", "quantity": 1, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"overflowing price", "POST", "/v1/orders", "{" + buy + R"("price": "99999999999999999999", "quantity": 1, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"price with 7 decimals", "POST", "/v1/orders", "{" + buy + R"("price": "2.0000001", "quantity": 1, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"off-tick price", "POST", "/v1/orders", "{" + buy + R"("price": "2.00001", "quantity": 1, "duration": 3600})", "buyer", 422, "off_tick"},
      {"overflowing quantity", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1e30, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"quantity as a string", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": "4", "duration": 3600})", "buyer", 400, "invalid_field"},
      {"negative quantity", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": -4, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"huge quantity", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 9223372036854775807, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"window ends before it starts", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, )" + window(86400, -3600) + "}", "buyer", 400, "invalid_field"},
      {"window in the past", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, )" + window(-86400, 3600) + "}", "buyer", 422, "window_in_past"},
      {"a window under a minute", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, )" + window(86400, 59) + "}", "buyer", 400, "invalid_field"},
      {"a sell's window under a minute", "POST", "/v1/orders", "{" + sell + R"("price": "2", "quantity": 1, )" + window(3600, 30) + "}", "provider", 400, "invalid_field"},
      {"a key given twice (which price?)", "POST", "/v1/orders", "{" + buy + R"("price": "0.0100", "price": "5.0000", "quantity": 1, "duration": 3600})", "buyer", 400, "malformed_json"},
      {"a key given twice in a nested object", "POST", "/v1/orders", R"({"side": "buy", "market": "H100-SXM-80G", "price": "2", "quantity": 1, "duration": 3600, "x": {"a": 1, "a": 2}})", "buyer", 400, "malformed_json"},
      {"both window and duration", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 60, )" + window(86400, 3600) + "}", "buyer", 400, "invalid_field"},
      {"bad time", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "start": "tomorrow", "end": "later"})", "buyer", 400, "invalid_field"},
      {"duration too short", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 5})", "buyer", 400, "invalid_field"},
      {"unknown market", "POST", "/v1/orders", R"({"side": "buy", "market": "QUANTUM-1", "price": "2", "quantity": 1, "duration": 3600})", "buyer", 404, "not_found"},
      {"SQL in market", "POST", "/v1/orders", R"({"side": "buy", "market": "'; DROP TABLE orders;--", "price": "2", "quantity": 1, "duration": 3600})", "buyer", 404, "not_found"},
      {"SQL in client_order_id", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600, "client_order_id": "x'; DELETE FROM orders;--"})", "buyer", 400, "invalid_field"},
      {"unknown field", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600, "leverage": 100})", "buyer", 400, "unknown_field"},
      {"bad side", "POST", "/v1/orders", R"({"side": "short", "market": "H100-SXM-80G", "price": "2", "quantity": 1, "duration": 3600})", "buyer", 400, "invalid_field"},
      {"bad time_in_force", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600, "time_in_force": "forever"})", "buyer", 400, "invalid_field"},
      {"single_pool on gtc", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600, "single_pool": true})", "buyer", 400, "invalid_field"},
      {"lot that does not divide", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 5, "min_chunk": 2, "duration": 3600})", "buyer", 422, "quantity_not_multiple_of_chunk"},
      {"unknown pool", "POST", "/v1/orders", R"({"side": "sell", "pool_id": "987654", "price": "2", "quantity": 1, )" + window(3600, 3600) + "}", "provider", 404, "not_found"},
      {"someone else's pool", "POST", "/v1/orders", "{" + sell + R"("price": "2", "quantity": 1, )" + window(3600, 3600) + "}", "rival", 404, "not_found"},
      {"more GPUs than the pool has", "POST", "/v1/orders", "{" + sell + R"("price": "2", "quantity": 9, )" + window(3600, 3600) + "}", "provider", 422, "insufficient_pool_capacity"},
      {"sell without provide scope", "POST", "/v1/orders", "{" + sell + R"("price": "2", "quantity": 1, )" + window(3600, 3600) + "}", "buyer", 403, "forbidden"},
      {"buy without trade scope", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600})", "provider", 403, "forbidden"},
      {"no key", "POST", "/v1/orders", "{}", "none", 401, "unauthenticated"},
      {"revoked key", "POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600})", "revoked", 401, "unauthenticated"},
      {"garbage bearer", "GET", "/v1/orders", "", "Bearer !!not-a-key!!", 401, "unauthenticated"},
      {"control bytes in a header", "GET", "/v1/orders", "", "Bearer \x01\x02", 400, "malformed_request"},
      {"basic auth", "GET", "/v1/orders", "", "Basic dXNlcjpwYXNz", 401, "unauthenticated"},
      {"admin route with a trade key", "POST", "/v1/markets/H100-SXM-80G/halt", "{}", "buyer", 403, "forbidden"},
      {"oversized body", "POST", "/v1/orders", "{\"pad\": \"" + std::string(70 * 1024, 'a') + "\"}", "buyer", 413, "body_too_large"},
      {"order id not a number", "GET", "/v1/orders/abc", "", "buyer", 404, "not_found"},
      {"negative order id", "DELETE", "/v1/orders/-1", "", "buyer", 404, "not_found"},
      {"another account's order", "GET", "/v1/orders/1", "", "rival", 404, "not_found"},
      {"limit zero", "GET", "/v1/orders?limit=0", "", "buyer", 400, "invalid_field"},
      {"limit not a number", "GET", "/v1/orders?limit=ten", "", "buyer", 400, "invalid_field"},
      {"bad cursor", "GET", "/v1/orders?cursor=%27%3B", "", "buyer", 400, "invalid_field"},
      {"bad status filter", "GET", "/v1/orders?status=deleted", "", "buyer", 400, "invalid_field"},
      {"bytes that are not UTF-8 as a market filter", "GET", "/v1/orders?market=%FF%FE", "", "buyer", 404, "not_found"},
      {"unknown market filter of fills", "GET", "/v1/fills?market=Z80", "", "buyer", 404, "not_found"},
      {"bad bucket", "GET", "/v1/markets/H100-SXM-80G/book?bucket=2027-13", "", "none", 400, "invalid_field"},
      {"bad depth", "GET", "/v1/markets/H100-SXM-80G/book?depth=-5", "", "none", 400, "invalid_field"},
      {"book of an unknown market", "GET", "/v1/markets/NOPE/book", "", "none", 404, "not_found"},
      {"resize to zero nodes", "PATCH", "/v1/pools/" + pool_id, R"({"nodes": 0})", "provider", 400, "invalid_field"},
      {"resize someone else's pool", "PATCH", "/v1/pools/" + pool_id, R"({"nodes": 4})", "rival", 404, "not_found"},
      {"pool with a bad region", "POST", "/v1/pools", R"({"market": "H100-SXM-80G", "region": "Germany", "tier": "bare_metal", "gpus_per_node": 8, "nodes": 1, "pue": "1.2", "renewable_pct": 50, "carbon_g_per_kwh": 200})", "provider", 400, "invalid_field"},
      {"pool with PUE below 1", "POST", "/v1/pools", R"({"market": "H100-SXM-80G", "region": "DE", "tier": "bare_metal", "gpus_per_node": 8, "nodes": 1, "pue": "0.5", "renewable_pct": 50, "carbon_g_per_kwh": 200})", "provider", 400, "invalid_field"},
      {"verify with an expiry in the past", "POST", "/v1/pools/" + pool_id + "/verify", R"({"verified": true, "expires_at": "2001-01-01T00:00:00Z", "evidence": "x"})", "admin", 400, "invalid_field"},
      {"negative limits", "PUT", "/v1/accounts/" + buyer.account_id + "/limits", R"({"max_open_gpus": -1, "max_open_notional": "10", "max_open_orders": 5})", "admin", 400, "invalid_field"},
      {"test clock without --test-clock", "POST", "/v1/admin/clock", R"({"advance_s": 60})", "admin", 404, "not_found"},
      {"unknown route", "GET", "/v1/../../etc/passwd", "", "none", 404, "not_found"},
      {"a bare % in the query of a market-scoped cancel-all", "DELETE", "/v1/orders?market=H100-SXM-80G&x=%", "", "buyer", 400, "malformed_request"},
      {"a broken escape in a path", "GET", "/v1/orders/by-client-id/run%3", "", "buyer", 400, "malformed_request"},
      {"raw bytes over 0x7F in a path", "GET", "/v1/orders/by-client-id/\xff\xfe", "", "buyer", 400, "malformed_request"},
      {"empty verification evidence", "POST", "/v1/pools/" + pool_id + "/verify", R"({"verified": true, "expires_at": "2030-01-01T00:00:00Z", "evidence": ""})", "admin", 400, "invalid_field"},
      {"blank verification evidence", "POST", "/v1/pools/" + pool_id + "/verify", R"({"verified": true, "expires_at": "2030-01-01T00:00:00Z", "evidence": " \t "})", "admin", 400, "invalid_field"},
      {"verify a retired pool", "POST", "/v1/pools/" + retired_id + "/verify", R"({"verified": true, "expires_at": "2030-01-01T00:00:00Z", "evidence": "audit"})", "admin", 404, "not_found"},
      {"NUL in verification evidence", "POST", "/v1/pools/" + pool_id + "/verify", R"({"verified": true, "expires_at": "2030-01-01T00:00:00Z", "evidence": "a\u0000b"})", "admin", 400, "invalid_field"},
      {"NUL in an account name", "POST", "/v1/accounts", R"({"name": "a\u0000b", "scopes": ["read"]})", "admin", 400, "invalid_field"},
      {"wrong method", "PUT", "/v1/orders", "{}", "buyer", 405, "method_not_allowed"},
  };
  REQUIRE(cases.size() >= 40);

  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  auto count_orders = [&] { return conn.exec("SELECT count(*) FROM orders").integer(0, 0); };
  for (const auto& c : cases) {
    INFO(c.what << ": " << c.method << " " << c.path << " " << c.body.substr(0, 200));
    std::vector<std::pair<std::string, std::string>> headers;
    if (c.key == "buyer") headers = bearer(buyer.api_key);
    else if (c.key == "provider") headers = bearer(provider.api_key);
    else if (c.key == "admin") headers = bearer(admin.api_key);
    else if (c.key == "rival") headers = bearer(rival.api_key);
    else if (c.key == "revoked") headers = bearer(revoked.api_key);
    else if (c.key != "none") headers = {{"Authorization", c.key}};
    auto before = count_orders();
    auto reply = http.request(c.method, c.path, c.body, headers);
    INFO(reply.body);
    CHECK(reply.status == c.status);
    CHECK(reply.json().at("error").at("code").as_string() == c.code);
    // Only the engine's rejects (422) are stored, as rejected orders; nothing else leaves a trace.
    CHECK(count_orders() == before + (c.status == 422 ? 1 : 0));
  }

  // Headers over the limit are refused before any route runs.
  auto huge = http.request("GET", "/v1/markets", "", {{"X-Padding", std::string(20 * 1024, 'h')}});
  CHECK(huge.status == 431);
  CHECK(huge.json().at("error").at("code").as_string() == "headers_too_large");

  // And the server is still there, serving.
  CHECK(http.get("/healthz").status == 200);
  auto ok = http.request("POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, "duration": 3600})", bearer(buyer.api_key));
  CHECK(ok.status == 201);
  // The shortest window there is: a minute (59 s is in the table).
  auto minute = http.request("POST", "/v1/orders", "{" + buy + R"("price": "2", "quantity": 1, )" + window(86400, 60) + "}",
                             bearer(buyer.api_key));
  INFO(minute.body);
  CHECK(minute.status == 201);
  CHECK(server.process().running());
}
