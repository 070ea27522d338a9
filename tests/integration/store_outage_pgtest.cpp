// PostgreSQL stops under a running gpuexd: /readyz says so, gpuexd stays up, and recovers by itself.
#include <unistd.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "support/cluster.hpp"
#include "support/http_client.hpp"

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

TEST_CASE("readyz follows PostgreSQL down and up while gpuexd keeps running") {
  OwnCluster cluster;
  Gpuexd server(cluster.url());
  REQUIRE(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(10)));

  REQUIRE(cluster.pg("stop").exit_code == 0);
  CHECK(wait_for_status(server.port(), "/readyz", 503, std::chrono::seconds(10)));
  CHECK(server.process().running());
  HttpClient client(server.port());
  CHECK(client.get("/healthz").status == 200);
  auto markets = client.get("/v1/markets");
  CHECK(markets.status == 503);
  CHECK(markets.json().at("error").at("code").as_string() == "store_unavailable");
  CHECK_THAT(client.get("/metrics").body, Catch::Contains("gpuex_store_up 0"));

  REQUIRE(cluster.pg("start").exit_code == 0);
  CHECK(wait_for_status(server.port(), "/readyz", 200, std::chrono::seconds(20)));
  CHECK(client.get("/v1/markets").status == 200);
  CHECK(server.process().running());
  CHECK(server.stop() == 0);
}
