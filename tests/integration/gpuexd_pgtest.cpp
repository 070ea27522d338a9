// gpuexd against a real PostgreSQL over real sockets: start-up, migrations, markets, errors, shutdown.
#include <signal.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <thread>

#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;

namespace {
std::size_t migration_files() {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(GPUEX_SOURCE_DIR) + "/migrations")) {
    if (e.path().extension() == ".sql") ++n;
  }
  return n;
}

const boost::json::object* find_market(const boost::json::array& markets, std::string_view id) {
  for (const auto& m : markets) {
    if (m.as_object().at("id").as_string() == id) return &m.as_object();
  }
  return nullptr;
}
}  // namespace

TEST_CASE("gpuexd is ready and lists the seeded markets from PostgreSQL") {
  TestDatabase db;
  Gpuexd server(db.dsn());
  HttpClient client(server.port());

  CHECK(client.get("/healthz").status == 200);
  REQUIRE(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(10)));
  // The test harness's --engine-heap-mib 16, faulted in before recovery.
  CHECK_THAT(server.log(), Catch::Contains("engine heap: 16 MiB faulted in ahead"));

  auto reply = client.get("/v1/markets");
  REQUIRE(reply.status == 200);
  CHECK(reply.headers["content-type"] == "application/json");
  auto body = reply.json();
  const auto& markets = body.at("markets").as_array();
  // data/gpu-models.csv has 15 models.
  CHECK(markets.size() == 15);

  const auto* h100 = find_market(markets, "H100-SXM-80G");
  REQUIRE(h100);
  CHECK(h100->at("perf_factor").as_string() == "1.000000");  // the reference unit
  CHECK(h100->at("tick_size").as_string() == "0.0001");
  CHECK(h100->at("memory_gb").as_int64() == 80);
  CHECK(h100->at("halted").as_bool() == false);

  // 756 / 989 dense BF16 TFLOPS = 0.7644084..., to 6 decimals.
  const auto* pcie = find_market(markets, "H100-PCIE-80G");
  REQUIRE(pcie);
  CHECK(pcie->at("perf_factor").as_string() == "0.764408");
  // 2250 / 989 = 2.2750252...
  const auto* b200 = find_market(markets, "B200-180G");
  REQUIRE(b200);
  CHECK(b200->at("perf_factor").as_string() == "2.275025");

  // The markets really come from PostgreSQL: a row added there shows up.
  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  conn.exec("INSERT INTO markets (id, vendor, name, memory_gb, bf16_dense_tflops, mem_bw_tbps, tdp_w, perf_factor) "
            "VALUES ('TEST-GPU-1G', 'Test', 'Test GPU', 1, 989, 1, 1, 1)");
  CHECK(client.get("/v1/markets").json().at("markets").as_array().size() == 16);
}

TEST_CASE("unknown routes are 404 and wrong methods 405, as JSON errors") {
  TestDatabase db;
  Gpuexd server(db.dsn());
  HttpClient client(server.port());

  auto missing = client.get("/v1/no-such-thing");
  CHECK(missing.status == 404);
  CHECK(missing.json().at("error").at("code").as_string() == "not_found");

  auto wrong = client.request("DELETE", "/v1/markets");
  CHECK(wrong.status == 405);
  CHECK(wrong.json().at("error").at("code").as_string() == "method_not_allowed");
  CHECK(wrong.headers["allow"] == "GET, HEAD");

  // HEAD is GET's headers without the body: the length is that of the GET answer.
  auto get = client.get("/v1/markets");
  auto head = client.request("HEAD", "/v1/markets");
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(head.headers["content-length"] == std::to_string(get.body.size()));
  CHECK(head.headers["content-type"] == get.headers["content-type"]);
  CHECK(client.request("HEAD", "/v1/no-such-thing").status == 404);

  // An over-long body is refused with 413 before the connection closes, and the server goes on.
  auto big = client.request("POST", "/v1/markets", std::string(100 * 1024, 'x'));
  CHECK(big.status == 413);
  CHECK(big.json().at("error").at("code").as_string() == "body_too_large");
  CHECK(client.get("/healthz").status == 200);
}

TEST_CASE("metrics count requests by route and status and report the store") {
  TestDatabase db;
  Gpuexd server(db.dsn());
  HttpClient client(server.port());
  REQUIRE(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(10)));
  for (int i = 0; i < 3; ++i) REQUIRE(client.get("/v1/markets").status == 200);
  client.get("/v1/nothing");

  auto text = client.get("/metrics").body;
  CHECK_THAT(text, Catch::Contains(R"x(gpuex_http_requests_total{route="/v1/markets",method="GET",status="200"} 3)x"));
  CHECK_THAT(text, Catch::Contains(R"x(gpuex_http_requests_total{route="(unknown)",method="GET",status="404"} 1)x"));
  CHECK_THAT(text, Catch::Contains(R"x(gpuex_http_request_duration_seconds_count{route="/v1/markets"} 3)x"));
  CHECK_THAT(text, Catch::Contains("gpuex_store_up 1"));
}

TEST_CASE("serve refuses a database with unapplied migrations unless told to migrate") {
  TestDatabase db;
  auto refused = run_gpuexd({"serve", "--dsn", db.dsn(), "--listen", "127.0.0.1:0"});
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Catch::Contains("unapplied migration"));

  Gpuexd server(db.dsn(), {"--migrate"}, /*migrate_first=*/false);
  HttpClient client(server.port());
  CHECK(client.get("/v1/markets").status == 200);
}

TEST_CASE("a second gpuexd on the same database refuses to start, and one starts once the first is gone") {
  TestDatabase db;
  auto first = std::make_unique<Gpuexd>(db.dsn());
  auto second = run_gpuexd({"serve", "--dsn", db.dsn(), "--listen", "127.0.0.1:0"});
  CHECK(second.exit_code == 2);
  CHECK_THAT(second.output, Catch::Contains("another gpuexd serves"));
  CHECK(HttpClient(first->port()).get("/v1/markets").status == 200);  // the first is untouched

  first->process().signal(SIGKILL);  // its lock goes with its connection
  first->process().wait(std::chrono::seconds(10));
  first.reset();
  Gpuexd again(db.dsn(), {}, false);
  CHECK(HttpClient(again.port()).get("/v1/markets").status == 200);
}

TEST_CASE("the serving lock is taken again when its connection is lost, and a server that finds it taken by another stops") {
  TestDatabase db;
  Gpuexd server(db.dsn());  // probes the store every 200 ms
  REQUIRE(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(10)));
  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  // The backend holding the serving lock of this database (0 when nobody holds it).
  auto holder = [&] {
    auto r = conn.exec(
        "SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7474017 AND granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())");
    return r.integer(0, 0);
  };
  auto first = holder();
  REQUIRE(first != 0);
  REQUIRE(first != conn.backend_pid());

  // PostgreSQL ends that backend (as a restart would): the server takes its lock again.
  conn.exec("SELECT pg_terminate_backend($1::int)", {std::to_string(first)});
  std::int64_t again = 0;
  for (int i = 0; i < 100 && (again == 0 || again == first); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    again = holder();
  }
  CHECK(again != 0);
  CHECK(again != first);
  CHECK(server.process().running());
  CHECK(HttpClient(server.port()).get("/v1/markets").status == 200);

  // This time another holder queues for the lock before the server reconnects (as a second gpuexd
  // started meanwhile would): the server must not go on writing beside it.
  conn.exec("SELECT pg_terminate_backend($1::int), pg_advisory_lock(7474017)", {std::to_string(again)});
  CHECK(holder() == conn.backend_pid());
  auto code = server.process().wait(std::chrono::seconds(10));
  REQUIRE(code.has_value());
  CHECK(*code == 3);
  CHECK_THAT(server.log(), Catch::Contains("another gpuexd took this database's serving lock"));
}

TEST_CASE("migrate applies every migration exactly once") {
  TestDatabase db;
  auto first = run_gpuexd({"migrate", "--dsn", db.dsn()});
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Contains("applied"));
  auto second = run_gpuexd({"migrate", "--dsn", db.dsn()});
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Contains("up to date"));

  auto conn = gpuex::store::PgConnection::connect(db.dsn());
  CHECK(static_cast<std::size_t>(conn.exec("SELECT count(*) FROM schema_migrations").integer(0, 0)) ==
        migration_files());
  CHECK(conn.exec("SELECT count(*) FROM markets").integer(0, 0) == 15);
}

TEST_CASE("SIGTERM stops gpuexd cleanly") {
  TestDatabase db;
  Gpuexd server(db.dsn());
  HttpClient client(server.port());
  REQUIRE(client.get("/healthz").status == 200);  // a keep-alive connection stays open
  CHECK(server.stop() == 0);
  CHECK_THAT(server.log(), Catch::Contains("gpuexd stopped"));
}

TEST_CASE("bad start-up settings fail with a clear message") {
  auto bad_listen = run_gpuexd({"serve", "--dsn", "postgresql://127.0.0.1:1/none", "--listen", "nowhere"});
  CHECK(bad_listen.exit_code != 0);
  CHECK_THAT(bad_listen.output, Catch::Contains("HOST:PORT"));

  auto bad_heap = run_gpuexd({"serve", "--dsn", "postgresql://127.0.0.1:1/none", "--engine-heap-mib", "-1"});
  CHECK(bad_heap.exit_code != 0);
  CHECK_THAT(bad_heap.output, Catch::Contains("--engine-heap-mib"));

  auto no_db = run_gpuexd({"migrate", "--dsn", "postgresql://postgres@127.0.0.1:1/none", "--db-wait-s", "0"});
  CHECK(no_db.exit_code == 1);
  CHECK_THAT(no_db.output, Catch::Contains("cannot connect to PostgreSQL"));
}
