// kill -9 under concurrent load, again and again: every acknowledged order survives exactly once with
// its fills, nothing is half-done, no pool is oversold, and retries never duplicate.
#include <signal.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;

namespace {


struct Sent {
  std::string account_key;
  std::string client_order_id;
  std::string body;
  unsigned status = 0;     // 0: no answer (the server died with it in flight)
  std::string order_id;    // when acknowledged
  json::array fills;       // the fills acknowledged with it
};

}  // namespace

TEST_CASE("acknowledged orders survive kill -9 exactly once, with their fills") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto provider = create_account(db.dsn(), "provider", "provide,read");
  std::vector<CreatedAccount> buyers;
  for (int i = 0; i < 3; ++i) buyers.push_back(create_account(db.dsn(), "buyer" + std::to_string(i), "trade,read"));
  // Snapshots every 40 commands, so restarts restore one and replay the rest of the log.
  const std::vector<std::string> args = {"--tick-ms", "100", "--key-rate", "10000", "--key-burst", "10000",
                                         "--snapshot-every", "40"};

  std::vector<std::string> pools;
  {
    Gpuexd server(db.dsn(), args, false);
    HttpClient http(server.port());
    for (const char* region : {"DE", "US"}) {
      auto r = http.request("POST", "/v1/pools",
                            json::serialize(json::object{{"market", "H100-SXM-80G"}, {"region", region}, {"tier", "bare_metal"},
                                                         {"gpus_per_node", 8}, {"nodes", 2}, {"pue", "1.2"},
                                                         {"renewable_pct", 50}, {"carbon_g_per_kwh", 200}}),
                            bearer(provider.api_key));
      REQUIRE(r.status == 201);
      pools.emplace_back(r.json().at("id").as_string());
    }
    REQUIRE(server.stop() == 0);
  }

  std::mutex mutex;
  std::vector<Sent> sent;
  std::mt19937 rng(424242);
  int next_id = 0;

  for (int round = 0; round < 6; ++round) {
    Gpuexd server(db.dsn(), args, false);
    std::atomic<bool> dead{false};
    std::vector<std::thread> clients;
    // Three buyers and the provider, each on its own connection.
    for (int c = 0; c < 4; ++c) {
      unsigned seed = rng();
      clients.emplace_back([&, c, seed] {
        std::mt19937 local(seed);
        HttpClient http(server.port(), std::chrono::seconds(5));
        const auto& who = c < 3 ? buyers[static_cast<std::size_t>(c)] : provider;
        while (!dead) {
          Sent s;
          s.account_key = who.api_key;
          {
            std::lock_guard lock(mutex);
            s.client_order_id = "r" + std::to_string(round) + "-" + std::to_string(next_id++);
          }
          int price = 15000 + static_cast<int>(local() % 10000);
          char p[16];
          std::snprintf(p, sizeof p, "%d.%04d", price / 10000, price % 10000);
          json::object body;
          if (c == 3) {
            body = {{"side", "sell"}, {"pool_id", pools[local() % 2]}, {"price", p},
                    {"quantity", 1 + static_cast<int>(local() % 4)}, {"start", gpuex::format_rfc3339(unix_now())},
                    {"end", gpuex::format_rfc3339(unix_now() + 86400 * (1 + static_cast<int>(local() % 20)))}};
          } else {
            body = {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", p},
                    {"quantity", 1 + static_cast<int>(local() % 4)}, {"duration", 3600 * (1 + static_cast<int>(local() % 24))}};
            if (local() % 3 == 0) body["time_in_force"] = "ioc";
          }
          body["client_order_id"] = s.client_order_id;
          s.body = json::serialize(body);
          try {
            auto r = http.request("POST", "/v1/orders", s.body, bearer(who.api_key));
            s.status = r.status;
            auto j = r.json();
            if (r.status == 201 || r.status == 200) {
              s.order_id = std::string(j.at("order").at("id").as_string());
              s.fills = j.at("fills").as_array();
            }
            if (r.status == 422) s.order_id = std::string(j.at("error").at("order_id").as_string());
          } catch (const std::exception&) {
            s.status = 0;
          }
          std::lock_guard lock(mutex);
          sent.push_back(s);
          if (s.status == 0) return;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 700));
    server.process().signal(SIGKILL);
    dead = true;
    server.process().wait(std::chrono::seconds(10));
    for (auto& t : clients) t.join();
  }

  std::size_t acked = 0, unknown = 0, acked_fills = 0;
  for (const auto& s : sent) {
    if (s.status == 0) ++unknown;
    else if (!s.order_id.empty()) ++acked;
    acked_fills += s.fills.size();
  }
  INFO(sent.size() << " orders sent, " << acked << " acknowledged, " << unknown << " in flight at a kill, "
                   << acked_fills << " fills acknowledged");
  REQUIRE(acked > 50);
  REQUIRE(unknown >= 6);
  REQUIRE(acked_fills > 10);

  {
    // Recovery from the latest snapshot and the log after it equals a replay of the whole log. (No tick in
    // the minute either server lives, and kill -9 logs nothing: both recover the same log.)
    auto recovered = [&](std::vector<std::string> extra) {
      extra.insert(extra.begin(), {"--tick-ms", "60000"});
      Gpuexd s(db.dsn(), extra, false);
      std::string log = s.log();
      s.process().signal(SIGKILL);
      s.process().wait(std::chrono::seconds(10));
      std::smatch m;
      REQUIRE(std::regex_search(log, m, std::regex("recovered the engine from PostgreSQL in \\d+ ms: (.*), (\\d+) commands "
                                                   "replayed, .* at seq (\\d+), state digest ([0-9a-f]+)")));
      return std::vector<std::string>{m[1], m[2], m[3], m[4]};
    };
    auto from_snapshot = recovered({});
    INFO("from a snapshot: " << from_snapshot[0] << ", " << from_snapshot[1] << " commands replayed");
    CHECK(from_snapshot[0].starts_with("snapshot of seq"));
    auto conn = gpuex::store::PgConnection::connect(db.dsn());
    conn.exec("DELETE FROM engine_snapshots");
    auto from_log = recovered({"--snapshot-every", "0"});
    CHECK(from_log[0] == "no snapshot");
    CHECK(from_log[2] == from_snapshot[2]);
    CHECK(from_log[3] == from_snapshot[3]);
    CHECK(std::stoll(from_log[1]) > std::stoll(from_snapshot[1]));
  }

  Gpuexd server(db.dsn(), args, false);
  HttpClient http(server.port(), std::chrono::seconds(20));
  for (const auto& s : sent) {
    if (s.status != 0 && s.order_id.empty()) continue;  // refused before the engine (none expected)
    auto stored = http.request("GET", "/v1/orders/by-client-id/" + s.client_order_id, "", bearer(s.account_key));
    if (s.status != 0) {
      // Acknowledged: it exists, with the id we were told.
      INFO(s.client_order_id << " " << s.body);
      REQUIRE(stored.status == 200);
      CHECK(stored.json().at("id").as_string() == s.order_id);
    } else {
      CHECK((stored.status == 200 || stored.status == 404));
    }
    // A retry of the same body never creates a second order.
    auto retry = http.request("POST", "/v1/orders", s.body, bearer(s.account_key));
    INFO(retry.body);
    if (stored.status == 200) {
      CHECK((retry.status == 200 || retry.status == 422));
      auto j = retry.json();
      auto id = retry.status == 200 ? j.at("order").at("id") : j.at("error").at("order_id");
      CHECK(id.as_string() == stored.json().at("id").as_string());
      // Every fill acknowledged with the order is there, unchanged (later fills of a resting order come
      // beside them).
      const json::array none;
      const auto& now = retry.status == 200 ? j.at("fills").as_array() : none;
      for (const auto& fill : s.fills) {
        INFO("acknowledged fill " << json::serialize(fill));
        CHECK(std::find(now.begin(), now.end(), fill) != now.end());
      }
    } else {
      CHECK((retry.status == 201 || retry.status == 422));
    }
  }

  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  // Every client_order_id is one order.
  CHECK(conn.exec("SELECT count(*) FROM (SELECT account_id, client_order_id FROM orders "
                  "GROUP BY 1, 2 HAVING count(*) > 1) d").integer(0, 0) == 0);
  // Nothing half-done: each buy's filled quantity is exactly what its trades add up to.
  CHECK(conn.exec(R"sql(
    SELECT count(*) FROM orders o
    WHERE o.side = 'buy' AND (o.doc::json->>'filled_quantity')::int <>
          coalesce((SELECT sum(quantity) FROM trades t WHERE t.buy_order_id = o.id), 0))sql").integer(0, 0) == 0);
  CHECK(conn.exec("SELECT count(*) FROM trades t WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.id = t.lease_id)")
            .integer(0, 0) == 0);
  // No pool oversold at any instant: at every lease start, the leases holding GPUs fit in the pool.
  CHECK(conn.exec(R"sql(
    WITH held AS (
      SELECT pool_id, (lease->>'quantity')::int AS gpus,
             extract(epoch FROM (lease->>'start')::timestamptz) AS s,
             extract(epoch FROM coalesce((lease->>'ends_at')::timestamptz, (lease->>'end')::timestamptz)) AS e
      FROM leases WHERE status IN ('reserved', 'active'))
    SELECT count(*) FROM held a
    WHERE (SELECT sum(b.gpus) FROM held b WHERE b.pool_id = a.pool_id AND b.s <= a.s AND a.s < b.e) > 16)sql")
            .integer(0, 0) == 0);
}
