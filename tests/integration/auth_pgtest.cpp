// Accounts and API keys over real HTTP: scopes, revocation at once, hashes only, rate limits.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "server/auth.hpp"
#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"
#include "support/ws_client.hpp"

using namespace gpuex::test;

namespace {

std::string error_code(const HttpReply& reply) {
  return std::string(reply.json().at("error").at("code").as_string());
}

}  // namespace

TEST_CASE("admin keys create accounts and keys, and scopes are enforced") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {}, /*migrate_first=*/false);
  HttpClient client(server.port());

  auto created = client.request("POST", "/v1/accounts", R"({"name": "acme", "scopes": ["read", "trade"]})",
                                bearer(ops.api_key));
  REQUIRE(created.status == 201);
  auto body = created.json();
  std::string acme_id(body.at("account").at("id").as_string());
  std::string acme_key(body.at("api_key").as_string());
  CHECK(body.at("account").at("name").as_string() == "acme");
  CHECK(body.at("key").at("scopes") == boost::json::parse(R"(["read","trade"])"));
  CHECK(body.at("key").at("account_id") == body.at("account").at("id"));
  CHECK_FALSE(body.at("key").as_object().contains("api_key"));  // the secret once, as api_key
  CHECK(created.headers.count("ratelimit-limit") == 1);
  CHECK(created.headers.count("ratelimit-remaining") == 1);

  // A trade key is not an admin key: scopes are independent.
  auto forbidden = client.request("POST", "/v1/accounts", R"({"name": "x", "scopes": ["read"]})", bearer(acme_key));
  CHECK(forbidden.status == 403);
  CHECK(error_code(forbidden) == "forbidden");

  // No key, a malformed key, a well-formed unknown key.
  auto none = client.request("POST", "/v1/accounts", R"({"name": "x", "scopes": ["read"]})");
  CHECK(none.status == 401);
  CHECK(error_code(none) == "unauthenticated");
  CHECK(client.request("POST", "/v1/accounts", "{}", bearer("not-a-key")).status == 401);
  auto forged = gpuex::generate_key();
  CHECK(client.request("POST", "/v1/accounts", "{}", bearer(forged.key)).status == 401);
  // The right id with a wrong secret.
  std::string tampered = ops.api_key;
  tampered.back() = tampered.back() == '0' ? '1' : '0';
  CHECK(client.request("POST", "/v1/accounts", "{}", bearer(tampered)).status == 401);

  // A second key for acme, then an unknown account.
  auto issued = client.request("POST", "/v1/accounts/" + acme_id + "/keys", R"({"scopes": ["provide"]})",
                               bearer(ops.api_key));
  REQUIRE(issued.status == 201);
  CHECK(issued.json().at("account_id").as_string() == acme_id);
  CHECK(client.request("POST", "/v1/accounts/999999/keys", R"({"scopes": ["read"]})", bearer(ops.api_key)).status == 404);
  CHECK(client.request("POST", "/v1/accounts/abc/keys", R"({"scopes": ["read"]})", bearer(ops.api_key)).status == 404);

  // A key made with the CLI while the server runs works at once.
  auto late = create_account(db.dsn(), "late-admin", "admin,read");
  CHECK(client.request("POST", "/v1/accounts", R"({"name": "y", "scopes": ["read"]})", bearer(late.api_key)).status == 201);
}

TEST_CASE("a revoked key stops working at once") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  auto other = create_account(db.dsn(), "other-admin", "admin");
  Gpuexd server(db.dsn(), {}, false);
  HttpClient client(server.port());

  // Used once (cached), then revoked by another admin.
  REQUIRE(client.request("POST", "/v1/accounts", R"({"name": "a", "scopes": ["read"]})", bearer(other.api_key)).status == 201);
  auto revoked = client.request("DELETE", "/v1/keys/" + other.key_id, "", bearer(ops.api_key));
  REQUIRE(revoked.status == 200);
  CHECK(revoked.json().at("id").as_string() == other.key_id);
  auto after = client.request("POST", "/v1/accounts", R"({"name": "b", "scopes": ["read"]})", bearer(other.api_key));
  CHECK(after.status == 401);
  CHECK(client.request("DELETE", "/v1/keys/k_0000000000000000", "", bearer(ops.api_key)).status == 404);

  // And after a restart, from the database.
  server.stop();
  Gpuexd again(db.dsn(), {}, false);
  HttpClient client2(again.port());
  CHECK(client2.request("POST", "/v1/accounts", R"({"name": "c", "scopes": ["read"]})", bearer(other.api_key)).status == 401);
  CHECK(client2.request("POST", "/v1/accounts", R"({"name": "c", "scopes": ["read"]})", bearer(ops.api_key)).status == 201);
}

TEST_CASE("every route refuses a key without its scope, as API.md's endpoint table gives them") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  // One key per scope; each route names the scopes that may call it (any of them), from API.md.
  std::map<std::string, CreatedAccount> keys;
  for (const char* scope : {"read", "trade", "provide", "admin"}) keys[scope] = create_account(db.dsn(), scope, scope);
  Gpuexd server(db.dsn(), {"--test-clock", "--key-rate", "10000", "--key-burst", "10000"}, false);
  HttpClient client(server.port());
  struct Route {
    const char* method;
    const char* path;
    const char* body;
    std::set<std::string> scopes;
  };
  const std::string buy = R"({"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 1, "duration": 3600})";
  const std::string sell = R"({"side": "sell", "pool_id": "1", "price": "1.0000", "quantity": 1, "start": "2030-01-01T00:00:00Z", "end": "2030-01-02T00:00:00Z"})";
  const std::vector<Route> routes = {
      {"POST", "/v1/accounts", R"({"name": "x", "scopes": ["read"]})", {"admin"}},
      {"POST", "/v1/accounts/1/keys", R"({"scopes": ["read"]})", {"admin"}},
      {"DELETE", "/v1/keys/k_0000000000000001", "", {"admin"}},
      {"POST", "/v1/pools", "{}", {"provide"}},
      {"GET", "/v1/pools", "", {"provide"}},
      {"GET", "/v1/pools/1", "", {"provide"}},
      {"PATCH", "/v1/pools/1", R"({"nodes": 2})", {"provide"}},
      {"DELETE", "/v1/pools/1", "", {"provide"}},
      {"POST", "/v1/pools/1/verify", R"({"verified": false})", {"admin"}},
      {"POST", "/v1/markets/H100-SXM-80G/halt", "", {"admin"}},
      {"POST", "/v1/markets/H100-SXM-80G/resume", "", {"admin"}},
      {"PUT", "/v1/accounts/1/limits", "{}", {"admin"}},
      {"POST", "/v1/orders", buy.c_str(), {"trade"}},      // a buy needs trade...
      {"POST", "/v1/orders", sell.c_str(), {"provide"}},   // ...a sell provide
      {"GET", "/v1/orders", "", {"read"}},
      {"GET", "/v1/orders/1", "", {"read"}},
      {"GET", "/v1/orders/by-client-id/x", "", {"read"}},
      {"DELETE", "/v1/orders/1", "", {"trade", "provide"}},
      {"PATCH", "/v1/orders/1", R"({"quantity": 1})", {"trade", "provide"}},
      {"DELETE", "/v1/orders", "", {"trade", "provide"}},
      {"GET", "/v1/fills", "", {"read"}},
      {"GET", "/v1/leases", "", {"read"}},
      {"GET", "/v1/leases/1", "", {"read"}},
      {"POST", "/v1/leases/1/release", "", {"trade"}},
      {"GET", "/v1/admin/state-digest", "", {"admin"}},
      {"POST", "/v1/admin/clock", R"({"advance_s": 0})", {"admin"}},
  };
  for (const auto& r : routes) {
    for (const auto& [scope, who] : keys) {
      auto reply = client.request(r.method, r.path, r.body, bearer(who.api_key));
      INFO(r.method << " " << r.path << " " << r.body << " with a " << scope << " key: " << reply.status << " " << reply.body);
      if (r.scopes.count(scope)) {
        CHECK(reply.status != 403);
        CHECK(reply.status != 401);
      } else {
        CHECK(reply.status == 403);
        if (reply.status == 403) CHECK(error_code(reply) == "forbidden");
      }
    }
  }
}

TEST_CASE("a key revoked outside the server (gpuexd admin revoke-key, SQL) stops working there at once, also on its WebSocket") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  std::vector<CreatedAccount> readers;
  for (int i = 0; i < 3; ++i) readers.push_back(create_account(db.dsn(), "reader" + std::to_string(i), "read"));
  Gpuexd server(db.dsn(), {}, false);
  HttpClient client(server.port());
  // Each key is checked against PostgreSQL once, then cached.
  for (const auto& r : readers) REQUIRE(client.request("GET", "/v1/orders", "", bearer(r.api_key)).status == 200);
  WsClient ws(server.port(), bearer(readers[0].api_key));
  ws.send(boost::json::object{{"op", "subscribe"}, {"channels", boost::json::array{"orders"}}});
  REQUIRE(ws.expect("subscribed").at("channels").as_array().size() == 1);
  auto refused_within_5s = [&](const CreatedAccount& r) {
    for (int i = 0; i < 50; ++i) {
      if (client.request("GET", "/v1/orders", "", bearer(r.api_key)).status == 401) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };

  auto revoked = run_gpuexd({"admin", "revoke-key", "--dsn", db.dsn(), "--key-id", readers[0].key_id});
  INFO(revoked.output);
  REQUIRE(revoked.exit_code == 0);
  CHECK_THAT(revoked.output, Catch::Contains(R"("account_id":")" + readers[0].account_id + "\""));
  CHECK(refused_within_5s(readers[0]));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!ws.ended() && std::chrono::steady_clock::now() < deadline) ws.next(std::chrono::milliseconds(500));
  REQUIRE(ws.ended());
  CHECK(ws.ended()->reason == "the API key was revoked");

  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  conn.exec("UPDATE api_keys SET revoked_at = now() WHERE id = $1", {readers[1].key_id});
  CHECK(refused_within_5s(readers[1]));
  CHECK(client.request("GET", "/v1/orders", "", bearer(readers[2].api_key)).status == 200);  // the others still work

  // A revocation nobody heard (the announcement off, as if it came while the server's listening
  // connection was down) is found when that connection comes back.
  conn.exec_script("BEGIN; ALTER TABLE api_keys DISABLE TRIGGER api_keys_revoked; "
                   "UPDATE api_keys SET revoked_at = now() WHERE id = '" + readers[2].key_id + "'; "
                   "ALTER TABLE api_keys ENABLE TRIGGER api_keys_revoked; COMMIT");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(client.request("GET", "/v1/orders", "", bearer(readers[2].api_key)).status == 200);  // not heard yet
  conn.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name IN ('gpuexd', 'gpuexd health') "
            "AND datname = current_database() AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' "
            "AND objid = 7474017)");
  CHECK(refused_within_5s(readers[2]));

  auto unknown = run_gpuexd({"admin", "revoke-key", "--dsn", db.dsn(), "--key-id", "k_00000000000000ff"});
  CHECK(unknown.exit_code == 1);
  CHECK_THAT(unknown.output, Catch::Contains("no key k_00000000000000ff"));
  CHECK(server.process().running());
}

TEST_CASE("keys are stored only as SHA-256 hashes") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  CHECK(ops.api_key.size() == 4 + 18 + 1 + 64);  // gpx_ + k_<16 hex> + _ + 256 bits in hex

  // The stored hash is SHA-256 of the whole key as shown, computed here by PostgreSQL (not by gpuexd's code).
  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  auto row = conn.exec("SELECT key_sha256 = sha256(convert_to($2, 'UTF8')), api_keys::text FROM api_keys WHERE id = $1",
                       {ops.key_id, ops.api_key});
  REQUIRE(row.rows() == 1);
  CHECK(row.text(0, 0) == std::string("t"));
  std::string secret = ops.api_key.substr(ops.api_key.size() - 64);
  CHECK(std::string(row.text(0, 1)).find(secret) == std::string::npos);

  // Nor does a key reach the server's log, used right or wrong, in a header or a WebSocket auth.
  Gpuexd server(db.dsn(), {}, false);
  HttpClient client(server.port());
  CHECK(client.request("GET", "/v1/admin/state-digest", "", bearer(ops.api_key)).status == 200);
  const std::string wrong = ops.api_key.substr(0, ops.api_key.size() - 1) + (ops.api_key.back() == '0' ? "1" : "0");
  CHECK(client.request("GET", "/v1/admin/state-digest", "", bearer(wrong)).status == 401);
  {
    WsClient ws(server.port());
    ws.send(boost::json::object{{"op", "auth"}, {"key", ops.api_key}});
    CHECK(ws.expect("auth").at("account_id").is_string());
  }
  REQUIRE(server.stop() == 0);
  CHECK(server.log().find(secret) == std::string::npos);
  CHECK(server.log().find(wrong.substr(wrong.size() - 64)) == std::string::npos);
}

TEST_CASE("bad admin bodies get 400 with the field at fault") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {}, false);
  HttpClient client(server.port());

  struct Case {
    const char* body;
    const char* code;
    const char* field;
  };
  for (const Case& c : {Case{"{", "malformed_json", ""}, Case{"[]", "malformed_json", ""},
                        Case{R"({"scopes": ["read"]})", "missing_field", "name"},
                        Case{R"({"name": 5, "scopes": ["read"]})", "invalid_field", "name"},
                        Case{R"({"name": "", "scopes": ["read"]})", "invalid_field", "name"},
                        Case{R"({"name": "a", "scopes": ["root"]})", "invalid_field", "scopes"},
                        Case{R"({"name": "a", "scopes": []})", "invalid_field", "scopes"},
                        Case{R"({"name": "a", "scopes": "read"})", "invalid_field", "scopes"},
                        Case{R"({"name": "a", "scopes": ["read"], "admin": true})", "unknown_field", "admin"},
                        Case{R"({"name": "Robert'); DROP TABLE accounts;--", "scopes": ["read", 1]})", "invalid_field", "scopes"}}) {
    INFO(c.body);
    auto reply = client.request("POST", "/v1/accounts", c.body, bearer(ops.api_key));
    CHECK(reply.status == 400);
    CHECK(error_code(reply) == c.code);
    if (*c.field) CHECK(reply.json().at("error").at("field").as_string() == c.field);
  }
  // SQL in a string is data, nothing more.
  auto odd = client.request("POST", "/v1/accounts", R"({"name": "Robert'); DROP TABLE accounts;--", "scopes": ["read"]})",
                            bearer(ops.api_key));
  CHECK(odd.status == 201);
  CHECK(odd.json().at("account").at("name").as_string() == "Robert'); DROP TABLE accounts;--");
}

TEST_CASE("rate limits answer 429 with Retry-After and publish their headers") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {"--key-rate", "0.5", "--key-burst", "3", "--ip-rate", "0.5", "--ip-burst", "2"}, false);
  HttpClient client(server.port());

  std::vector<unsigned> statuses;
  for (int i = 0; i < 4; ++i) {
    statuses.push_back(client.request("POST", "/v1/accounts/999999/keys", R"({"scopes": ["read"]})", bearer(ops.api_key)).status);
  }
  CHECK(statuses == std::vector<unsigned>{404, 404, 404, 429});
  auto limited = client.request("POST", "/v1/accounts/999999/keys", R"({"scopes": ["read"]})", bearer(ops.api_key));
  CHECK(limited.status == 429);
  CHECK(error_code(limited) == "rate_limited");
  CHECK(limited.headers["retry-after"] == "2");
  CHECK(limited.headers["ratelimit-limit"] == "3");
  CHECK(limited.headers["ratelimit-remaining"] == "0");

  // Public data is limited per IP, apart from keys.
  CHECK(client.get("/v1/markets").headers["ratelimit-remaining"] == "1");
  CHECK(client.get("/v1/markets").status == 200);
  CHECK(client.get("/v1/markets").status == 429);
  // Health and metrics are for operators and load balancers: never limited, yet every answer publishes
  // the caller's limit (API.md), here the IP's, which the public reads above used up.
  for (int i = 0; i < 5; ++i) {
    auto health = client.get("/healthz");
    CHECK(health.status == 200);
    CHECK(health.headers["ratelimit-limit"] == "2");
    CHECK(health.headers["ratelimit-remaining"] == "0");
  }
  auto unknown_route = client.get("/v1/nothing-here");
  CHECK(unknown_route.status == 404);
  CHECK(unknown_route.headers["ratelimit-limit"] == "2");
}

TEST_CASE("requests without a valid key count against their IP's limit, and their answers carry its headers") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  auto reader = create_account(db.dsn(), "reader", "read");
  Gpuexd server(db.dsn(), {"--ip-rate", "0.5", "--ip-burst", "3", "--key-rate", "0.01", "--key-burst", "10"}, false);
  HttpClient client(server.port());

  // Guessing keys: well-formed but unknown, garbage, or none at all — 401 while the IP has tokens, then 429.
  const std::string guessed = ops.api_key.substr(0, ops.api_key.size() - 1) + (ops.api_key.back() == '0' ? "1" : "0");
  std::vector<unsigned> statuses;
  std::vector<std::string> remaining;
  for (const auto& auth : {std::string("Bearer ") + guessed, std::string("Bearer nonsense"), std::string()}) {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!auth.empty()) headers.emplace_back("Authorization", auth);
    auto r = client.request("GET", "/v1/orders", "", headers);
    statuses.push_back(r.status);
    remaining.push_back(r.headers["ratelimit-remaining"]);
  }
  CHECK(statuses == std::vector<unsigned>{401, 401, 401});
  CHECK(remaining == std::vector<std::string>{"2", "1", "0"});
  auto refused = client.request("GET", "/v1/orders", "", bearer(guessed));
  CHECK(refused.status == 429);
  CHECK(error_code(refused) == "rate_limited");
  CHECK(refused.headers.count("retry-after") == 1);

  // A valid key is limited by its own bucket, not by the IP's.
  auto mine = client.request("GET", "/v1/orders", "", bearer(reader.api_key));
  CHECK(mine.status == 200);
  CHECK(mine.headers["ratelimit-limit"] == "10");
  CHECK(mine.headers["ratelimit-remaining"] == "9");
  // A key without the scope is 403, and the request counts against the key.
  auto forbidden = client.request("POST", "/v1/accounts", R"({"name": "x", "scopes": ["read"]})", bearer(reader.api_key));
  CHECK(forbidden.status == 403);
  CHECK(forbidden.headers["ratelimit-remaining"] == "8");
}

TEST_CASE("store lookups of keys the server has not seen are limited per IP before they are made") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  std::vector<CreatedAccount> readers;
  for (int i = 0; i < 4; ++i) readers.push_back(create_account(db.dsn(), "reader" + std::to_string(i), "read"));
  // Lookups and the IP's requests share the per-IP rate and burst, in separate buckets.
  Gpuexd server(db.dsn(), {"--ip-rate", "0.01", "--ip-burst", "3", "--key-rate", "0.01", "--key-burst", "10"}, false);
  HttpClient client(server.port());

  // Three keys used for the first time: three lookups; the IP's own bucket is untouched.
  for (int i = 0; i < 3; ++i) CHECK(client.request("GET", "/v1/orders", "", bearer(readers[i].api_key)).status == 200);
  CHECK(client.get("/v1/markets").headers["ratelimit-remaining"] == "2");
  // No lookup left: a made-up key is refused before the store is asked, as is a real key not seen yet...
  const std::string& key = readers[0].api_key;
  const std::string made_up = key.substr(0, key.size() - 1) + (key.back() == '0' ? "1" : "0");
  auto refused = client.request("GET", "/v1/orders", "", bearer("gpx_k_00000000000000ff_" + std::string(64, 'a')));
  CHECK(refused.status == 429);
  CHECK(error_code(refused) == "rate_limited");
  CHECK(client.request("GET", "/v1/orders", "", bearer(readers[3].api_key)).status == 429);
  // ...while keys already seen need no lookup and keep working, each on its own bucket.
  CHECK(client.request("GET", "/v1/orders", "", bearer(readers[1].api_key)).status == 200);
  // A wrong secret for a key id already cached is judged without the store: 401, charged to the IP.
  auto wrong = client.request("GET", "/v1/orders", "", bearer(made_up));
  CHECK(wrong.status == 401);
  CHECK(wrong.headers["ratelimit-remaining"] == "1");
}

TEST_CASE("WebSocket auth shares the per-IP limit on store lookups of keys not seen") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto reader = create_account(db.dsn(), "reader", "read");
  Gpuexd server(db.dsn(), {"--ip-rate", "0.01", "--ip-burst", "3"}, false);
  auto made_up = [](int i) { return "gpx_k_00000000000000f" + std::to_string(i) + "_" + std::string(64, 'a'); };

  // The upgrade itself takes the IP's request bucket; each auth of a key not seen takes a lookup.
  WsClient ws(server.port());
  for (int i = 0; i < 3; ++i) {
    ws.send(boost::json::object{{"op", "auth"}, {"key", made_up(i)}});
    CHECK(ws.expect("error").at("code").as_string() == "unauthenticated");
  }
  ws.send(boost::json::object{{"op", "auth"}, {"key", made_up(3)}});
  CHECK(ws.expect("error").at("code").as_string() == "rate_limited");
  // A real key not seen yet waits too, on the upgrade as in a message.
  ws.send(boost::json::object{{"op", "auth"}, {"key", reader.api_key}});
  CHECK(ws.expect("error").at("code").as_string() == "rate_limited");
  auto refused = upgrade(server.port(), bearer(reader.api_key));
  CHECK(refused.status == 429);
  CHECK(refused.headers.count("retry-after") == 1);
}

TEST_CASE("an Idempotency-Key makes account and key creation happen once, and never shows a secret twice") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto ops = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {}, /*migrate_first=*/false);
  HttpClient client(server.port());
  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  auto count = [&conn](const char* table) { return conn.exec(std::string("SELECT count(*) FROM ").append(table).c_str()).integer(0, 0); };
  auto with_key = [&](const std::string& key) {
    return std::vector<std::pair<std::string, std::string>>{bearer(ops.api_key)[0], {"Idempotency-Key", key}};
  };
  const std::string body = R"({"name": "acme", "scopes": ["read", "trade"]})";
  const auto accounts_before = count("accounts");

  auto first = client.request("POST", "/v1/accounts", body, with_key("create-acme-1"));
  REQUIRE(first.status == 201);
  CHECK(first.headers.count("idempotent-replayed") == 0);
  std::string acme_id(first.json().at("account").at("id").as_string());
  std::string secret(first.json().at("api_key").as_string());

  // A repeat returns the original (API.md: 200) and creates nothing.
  auto again = client.request("POST", "/v1/accounts", body, with_key("create-acme-1"));
  REQUIRE(again.status == 200);
  CHECK(again.headers["idempotent-replayed"] == "true");
  CHECK(again.json().at("account").at("id").as_string() == acme_id);
  CHECK(again.json().at("key").at("id") == first.json().at("key").at("id"));
  CHECK(again.json().at("api_key").is_null());  // shown once
  CHECK(count("accounts") == accounts_before + 1);
  // The secret is nowhere in the database, the kept answer included.
  CHECK(conn.exec("SELECT count(*) FROM idempotency_keys WHERE body LIKE '%' || $1 || '%'", {secret}).integer(0, 0) == 0);

  auto other = client.request("POST", "/v1/accounts", R"({"name": "other", "scopes": ["read"]})", with_key("create-acme-1"));
  CHECK(other.status == 422);
  CHECK(error_code(other) == "idempotency_conflict");
  CHECK(count("accounts") == accounts_before + 1);

  // The same for a second key of the account; a request refused (unknown account) keeps nothing.
  const std::string keys = "/v1/accounts/" + acme_id + "/keys";
  auto issued = client.request("POST", keys, R"({"scopes": ["read"]})", with_key("acme-read-key"));
  REQUIRE(issued.status == 201);
  auto reissued = client.request("POST", keys, R"({"scopes": ["read"]})", with_key("acme-read-key"));
  CHECK(reissued.status == 200);
  CHECK(reissued.json().at("id") == issued.json().at("id"));
  CHECK(reissued.json().at("api_key").is_null());
  CHECK(conn.exec("SELECT count(*) FROM api_keys WHERE account_id = $1", {acme_id}).integer(0, 0) == 2);
  CHECK(client.request("POST", "/v1/accounts/999999/keys", R"({"scopes": ["read"]})", with_key("unknown")).status == 404);
  CHECK(client.request("POST", keys, R"({"scopes": ["read"]})", with_key("unknown")).status == 201);

  // Concurrent repeats of one key: one account, created once (201) and returned to the others (200).
  const auto before = count("accounts");
  std::vector<std::thread> threads;
  std::atomic<int> created{0}, returned{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      HttpClient c(server.port());
      auto r = c.request("POST", "/v1/accounts", R"({"name": "racer", "scopes": ["read"]})", with_key("race"));
      if (r.status == 201) ++created;
      if (r.status == 200) ++returned;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(created == 1);
  CHECK(returned == 3);
  CHECK(count("accounts") == before + 1);

  CHECK(client.request("POST", "/v1/accounts", body, with_key("bad key with spaces")).status == 400);
}
