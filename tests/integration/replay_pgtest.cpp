// `gpuexd replay` against a real gpuexd on a real PostgreSQL: after a few seconds the market it made is
// there through the API (pools, asks in the books, orders, fills, leases); it stops on SIGINT; it says so
// and fails when gpuexd cannot be reached or refuses its key.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;

namespace {

const std::string kOffers = std::string(GPUEX_SOURCE_DIR) + "/data/vast-offers-2026-02-27_2026-03-06.csv";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::int64_t count_items(HttpClient& http, const std::string& key, const std::string& target, const char* list) {
  auto r = http.request("GET", target, "", bearer(key));
  INFO(target << " -> " << r.body);
  REQUIRE(r.status == 200);
  return static_cast<std::int64_t>(r.json().at(list).as_array().size());
}

}  // namespace

TEST_CASE("replay turns real offers into pools and asks and runs buyers that trade", "[pg][replay]") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto admin = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {"--tick-ms", "100"}, false);
  const std::string accounts = scratch_path("replay-accounts.json");
  auto run = run_gpuexd({"replay", "--url", "http://127.0.0.1:" + std::to_string(server.port()), "--admin-key",
                         admin.api_key, "--offers", kOffers, "--rate", "25", "--seconds", "4", "--buyers", "2",
                         "--pools", "40", "--seed", "7", "--progress-s", "1", "--accounts", accounts});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.output.find("set up 40 pools") != std::string::npos);
  CHECK(run.output.find("replay: stopped after") != std::string::npos);
  CHECK(run.output.find("orders sent") != std::string::npos);

  // It holds API keys: nobody but its owner may read it, whatever the umask.
  namespace fs = std::filesystem;
  CHECK((fs::status(accounts).permissions() & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none);
  auto keys = json::parse(read_file(accounts)).as_object();
  const auto& providers = keys.at("providers").as_array();
  const auto& buyers = keys.at("buyers").as_array();
  REQUIRE(buyers.size() == 2);
  REQUIRE_FALSE(providers.empty());

  HttpClient http(server.port());
  // Every pool made is a provider's, with its ask.
  std::int64_t pools = 0;
  for (const auto& p : providers) {
    const std::string key(p.at("api_key").as_string());
    pools += count_items(http, key, "/v1/pools?limit=1000", "pools");
    CHECK(count_items(http, key, "/v1/orders?status=all&limit=1000", "orders") > 0);
  }
  CHECK(pools == 40);
  // The buyers placed orders, and some traded: fills and leases.
  std::int64_t orders = 0, fills = 0, leases = 0;
  for (const auto& b : buyers) {
    const std::string key(b.as_string());
    orders += count_items(http, key, "/v1/orders?status=all&limit=1000", "orders");
    fills += count_items(http, key, "/v1/fills?limit=1000", "fills");
    leases += count_items(http, key, "/v1/leases", "leases");
  }
  // Every order the replay saw accepted (2xx, from its last line) is one of the buyers' orders.
  std::smatch last;
  const std::regex accepted(R"(replay: stopped after [0-9]+ s: ([0-9]+) orders sent \([0-9.]+/s\), 2xx ([0-9]+),)");
  REQUIRE(std::regex_search(run.output, last, accepted));
  CHECK(std::stoll(last[1]) > 0);
  CHECK(orders == std::stoll(last[2]));
  CHECK(fills > 0);
  CHECK(leases > 0);
  // The asks are in the public books.
  std::int64_t ask_levels = 0;
  auto markets = http.get("/v1/markets").json().at("markets").as_array();
  for (const auto& m : markets) {
    auto book = http.get("/v1/markets/" + std::string(m.at("id").as_string()) + "/book?depth=1000").json();
    ask_levels += static_cast<std::int64_t>(book.at("asks").as_array().size());
  }
  CHECK(ask_levels > 0);

  // A second run with the same accounts file trades with the same buyers and makes no new pools.
  auto rerun = [&] {
    return run_gpuexd({"replay", "--url", "http://127.0.0.1:" + std::to_string(server.port()), "--admin-key",
                       admin.api_key, "--offers", kOffers, "--rate", "10", "--seconds", "1", "--pools", "40", "--seed",
                       "7", "--accounts", accounts});
  };
  auto again = rerun();
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK(again.output.find("reusing the 2 buyers") != std::string::npos);
  std::int64_t pools_after = 0;
  for (const auto& p : providers) {
    pools_after += count_items(http, std::string(p.at("api_key").as_string()), "/v1/pools?limit=1000", "pools");
  }
  CHECK(pools_after == 40);

  // Once the earlier run's asks are gone (they end after 90 days; here cancelled), reusing its accounts
  // would leave the market nothing to sell: a third run makes new accounts, pools and asks.
  for (const auto& p : providers) {
    REQUIRE(http.request("DELETE", "/v1/orders", "", bearer(std::string(p.at("api_key").as_string()))).status == 200);
  }
  auto third = rerun();
  INFO(third.output);
  REQUIRE(third.exit_code == 0);
  CHECK(third.output.find("have ended; making new accounts") != std::string::npos);
  CHECK(third.output.find("set up 40 pools") != std::string::npos);
  auto renewed = json::parse(read_file(accounts)).as_object();
  CHECK(renewed.at("buyers").as_array() != buyers);
}

TEST_CASE("replay waits out 429s and tries again", "[pg][replay]") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto admin = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {"--tick-ms", "100", "--key-rate", "5", "--key-burst", "5"}, false);
  // One buyer asking for 50 orders a second from a key allowed 5.
  auto run = run_gpuexd({"replay", "--url", "http://127.0.0.1:" + std::to_string(server.port()), "--admin-key",
                         admin.api_key, "--offers", kOffers, "--rate", "50", "--seconds", "3", "--buyers", "1",
                         "--pools", "5"});
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::smatch last;
  const std::regex counts(R"(replay: stopped after [0-9]+ s: ([0-9]+) orders sent .*, 4xx ([0-9]+), 5xx ([0-9]+), 429 waits ([0-9]+);)");
  REQUIRE(std::regex_search(run.output, last, counts));
  CHECK(std::stoll(last[4]) > 0);   // it was throttled...
  CHECK(std::stoll(last[2]) == 0);  // ...and no order was lost to it: a 429 is waited out, not counted as an answer
  CHECK(std::stoll(last[3]) == 0);
}

TEST_CASE("replay stops cleanly on SIGINT", "[pg][replay]") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto admin = create_account(db.dsn(), "ops", "admin");
  Gpuexd server(db.dsn(), {"--tick-ms", "100"}, false);
  const std::string log = scratch_path("replay.log");
  Process replay({GPUEX_GPUEXD_PATH, "replay", "--url", "http://127.0.0.1:" + std::to_string(server.port()),
                  "--admin-key", admin.api_key, "--offers", kOffers, "--rate", "5", "--pools", "10"},
                 log);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (replay.log().find("set up 10 pools") == std::string::npos && std::chrono::steady_clock::now() < deadline &&
         replay.running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  INFO(replay.log());
  REQUIRE(replay.log().find("set up 10 pools") != std::string::npos);
  replay.signal(SIGINT);
  auto code = replay.wait(std::chrono::seconds(20));
  REQUIRE(code.has_value());
  CHECK(*code == 0);
  CHECK(replay.log().find("replay: stopped after") != std::string::npos);
}

TEST_CASE("replay fails clearly when gpuexd cannot be reached or refuses the key", "[pg][replay]") {
  // Port 1 on loopback: nothing listens there.
  auto run = run_gpuexd({"replay", "--url", "http://127.0.0.1:1", "--admin-key", "k", "--offers", kOffers,
                         "--seconds", "2"});
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("cannot reach gpuexd at http://127.0.0.1:1") != std::string::npos);

  TestDatabase db;
  Gpuexd server(db.dsn(), {"--tick-ms", "100"});
  run = run_gpuexd({"replay", "--url", "http://127.0.0.1:" + std::to_string(server.port()), "--admin-key",
                    "not-a-key", "--offers", kOffers, "--seconds", "2"});
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("creating an account was refused: HTTP 401 unauthenticated") != std::string::npos);

  run = run_gpuexd({"replay", "--url", "https://127.0.0.1:1", "--admin-key", "k", "--offers", kOffers});
  CHECK(run.exit_code == 2);
  CHECK(run.output.find("plain HTTP") != std::string::npos);
}
