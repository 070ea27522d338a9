// PostgreSQL stops under a running gpuexd: /readyz says so, gpuexd stays up, and recovers by itself.
#include <signal.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"
#include "support/ws_client.hpp"

using namespace gpuex::test;

namespace {
// A private cluster of its own (scripts/pg with another name), so stopping it disturbs no other test.
class OwnCluster {
 public:
  OwnCluster() : env_{"GPUEX_PG_NAME=outage-" + std::to_string(::getpid())} {
    auto started = pg("start");
    INFO(started.output);
    REQUIRE(started.exit_code == 0);
    auto nl = started.output.find_last_not_of('\n');
    auto start = started.output.rfind('\n', nl);
    url_ = started.output.substr(start == std::string::npos ? 0 : start + 1, nl - (start == std::string::npos ? 0 : start + 1) + 1);
    REQUIRE(url_.rfind("postgresql://", 0) == 0);
  }
  ~OwnCluster() { pg("destroy"); }
  RunResult pg(const std::string& command) {
    return run_command({std::string(GPUEX_SOURCE_DIR) + "/scripts/pg", command}, env_);
  }
  const std::string& url() const { return url_; }

 private:
  std::vector<std::string> env_;
  std::string url_;
};
}  // namespace

TEST_CASE("readyz follows PostgreSQL down and up while gpuexd keeps running, and writes wait for it, and so does a dead man's switch") {
  OwnCluster cluster;
  REQUIRE(run_gpuexd({"migrate", "--dsn", cluster.url()}).exit_code == 0);
  auto buyer = create_account(cluster.url(), "buyer", "trade,read");
  auto ops = create_account(cluster.url(), "ops", "admin");
  auto trader = create_account(cluster.url(), "trader", "trade,read");  // arms a dead man's switch
  Gpuexd server(cluster.url(), {}, false);
  REQUIRE(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(10)));
  const std::string bid = R"({"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 2, "duration": 3600})";
  {
    HttpClient client(server.port());
    REQUIRE(client.request("POST", "/v1/orders", bid, bearer(buyer.api_key)).status == 201);
    // (The admin key is now known to gpuexd: it is checked without the store below.)
    REQUIRE(client.request("GET", "/v1/admin/state-digest", "", bearer(ops.api_key)).status == 200);
    const std::string low = R"({"side": "buy", "market": "H100-SXM-80G", "price": "0.9000", "quantity": 1, "duration": 3600})";
    REQUIRE(client.request("POST", "/v1/orders", low, bearer(trader.api_key)).status == 201);
  }
  auto trader_open = [&](HttpClient& c) {
    auto r = c.request("GET", "/v1/orders?status=open", "", bearer(trader.api_key));
    return r.status == 200 ? static_cast<int>(r.json().at("orders").as_array().size()) : -1;
  };
  WsClient armed(server.port(), bearer(trader.api_key));
  armed.send(boost::json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
  REQUIRE(armed.expect("cancel_on_disconnect").at("enabled").as_bool());

  REQUIRE(cluster.pg("stop").exit_code == 0);
  CHECK(wait_for_status(server.port(), "/readyz", 503, std::chrono::seconds(10)));
  CHECK(server.process().running());
  HttpClient client(server.port());
  CHECK(client.get("/healthz").status == 200);
  auto markets = client.get("/v1/markets");
  CHECK(markets.status == 503);
  CHECK(markets.json().at("error").at("code").as_string() == "store_unavailable");
  CHECK_THAT(client.get("/metrics").body, Catch::Contains("gpuex_store_up 0"));
  // A write that cannot be stored is refused whole; the published book still answers.
  auto refused = client.request("POST", "/v1/orders", bid, bearer(buyer.api_key));
  CHECK(refused.status == 503);
  CHECK(refused.json().at("error").at("code").as_string() == "store_unavailable");
  auto book = client.get("/v1/markets/H100-SXM-80G/book");
  CHECK(book.status == 200);
  CHECK(book.json().at("bids") == boost::json::parse(R"([["1.0000", 2], ["0.9000", 1]])"));
  // The engine's own state is answered only once it is known to be committed: not while the engine
  // may hold work the store lost (it is rebuilt from the store when the store returns).
  auto digest = client.request("GET", "/v1/admin/state-digest", "", bearer(ops.api_key));
  CHECK(digest.status == 503);
  CHECK(digest.json().at("error").at("code").as_string() == "store_unavailable");
  // A switch cannot be armed without the store; an armed one whose connection drops now fires when
  // the store is back (its cancel is retried).
  {
    WsClient ws(server.port(), bearer(buyer.api_key));
    ws.send(boost::json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
    auto error = ws.expect("error", {}, std::chrono::seconds(15));
    CHECK(error.at("code").as_string() == "store_unavailable");
  }
  armed.kill();

  REQUIRE(cluster.pg("start").exit_code == 0);
  CHECK(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(20)));
  CHECK(client.get("/v1/markets").status == 200);
  // Writes resume by themselves once the engine is rebuilt; the refused order never existed.
  bool accepted = false;
  for (int i = 0; i < 100 && !accepted; ++i) {
    accepted = client.request("POST", "/v1/orders", bid, bearer(buyer.api_key)).status == 201;
    if (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(accepted);
  for (int i = 0; i < 100 && trader_open(client) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(trader_open(client) == 0);
  CHECK(server.log().find("trying again") != std::string::npos);
  auto orders = client.request("GET", "/v1/orders?status=all", "", bearer(buyer.api_key));
  CHECK(orders.json().at("orders").as_array().size() == 2);
  CHECK(client.get("/v1/markets/H100-SXM-80G/book").json().at("bids") == boost::json::parse(R"([["1.0000", 4]])"));
  CHECK(client.request("GET", "/v1/admin/state-digest", "", bearer(ops.api_key)).status == 200);
  CHECK(server.process().running());
  CHECK(server.stop() == 0);
}

TEST_CASE("after PostgreSQL restarted while nothing was written, the first write commits (no failed batch)") {
  OwnCluster cluster;
  REQUIRE(run_gpuexd({"migrate", "--dsn", cluster.url()}).exit_code == 0);
  auto buyer = create_account(cluster.url(), "buyer", "trade,read");
  Gpuexd server(cluster.url(), {}, false);
  const std::string bid = R"({"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 2, "duration": 3600})";
  HttpClient client(server.port());
  REQUIRE(client.request("POST", "/v1/orders", bid, bearer(buyer.api_key)).status == 201);

  REQUIRE(cluster.pg("stop").exit_code == 0);
  REQUIRE(cluster.pg("start").exit_code == 0);
  CHECK(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(20)));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the writer checks a connection idle over 1 s
  auto placed = client.request("POST", "/v1/orders", bid, bearer(buyer.api_key));
  INFO(placed.body);
  CHECK(placed.status == 201);
  CHECK(server.log().find("did not commit") == std::string::npos);
}

TEST_CASE("a frozen writer backend: the write is answered 503 in bounded time, and the engine waits for that backend to be gone before reading the store") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto buyer = create_account(db.dsn(), "buyer", "trade,read");
  auto ops = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {"--store-timeout-ms", "1000"}, false);
  HttpClient client(server.port());
  const std::string bid = R"({"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 1, "duration": 3600})";
  REQUIRE(client.request("POST", "/v1/orders", bid, bearer(buyer.api_key)).status == 201);
  REQUIRE(client.request("GET", "/v1/admin/state-digest", "", bearer(ops.api_key)).status == 200);  // key cached

  // The writer's backend stops (as a frozen or stalled server would): its socket stays open, nothing answers.
  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  auto row = conn.exec("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = 'gpuexd writer'");
  REQUIRE(row.rows() == 1);
  const auto pid = static_cast<pid_t>(row.integer(0, 0));
  REQUIRE(::kill(pid, SIGSTOP) == 0);
  auto frozen = client.request("POST", "/v1/orders", bid, bearer(buyer.api_key));
  CHECK(frozen.status == 503);
  CHECK(frozen.json().at("error").at("code").as_string() == "store_unavailable");
  // Whether that transaction commits is unknown while its backend lives: no writes, not ready.
  CHECK(wait_for_status(server.port(), "/readyz", 503, std::chrono::seconds(5)));
  CHECK(client.request("POST", "/v1/orders", bid, bearer(buyer.api_key)).status == 503);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(client.get("/readyz").status == 503);

  REQUIRE(::kill(pid, SIGCONT) == 0);
  CHECK(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(20)));
  bool accepted = false;
  for (int i = 0; i < 100 && !accepted; ++i) {
    accepted = client.request("POST", "/v1/orders", bid, bearer(buyer.api_key)).status == 201;
    if (!accepted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(accepted);
  CHECK(server.log().find("terminated the backend") != std::string::npos);
  // The engine and the store agree: the state a clean stop leaves is the one a restart recovers.
  REQUIRE(server.stop() == 0);
  Gpuexd again(db.dsn(), {}, false);
  CHECK(recovered_at(again.log()) == stopped_at(server.log()));
}
