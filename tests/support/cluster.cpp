// See cluster.hpp.
#include "support/cluster.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <boost/json.hpp>

#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "support/http_client.hpp"

namespace gpuex::test {

std::string test_dsn() {
  const char* dsn = std::getenv("GPUEX_TEST_DSN");
  if (!dsn || !*dsn) FAIL("GPUEX_TEST_DSN is not set: run the integration tests through scripts/test");
  return dsn;
}

namespace {
// The same URL with another database name (the last path segment).
std::string with_database(const std::string& dsn, const std::string& db) {
  auto slash = dsn.rfind('/');
  if (slash == std::string::npos || dsn.find("://") == std::string::npos) {
    FAIL("GPUEX_TEST_DSN must be a postgresql:// URL, got " << dsn);
  }
  auto query = dsn.find('?', slash);
  return dsn.substr(0, slash + 1) + db + (query == std::string::npos ? "" : dsn.substr(query));
}
}  // namespace

TestDatabase::TestDatabase() {
  static std::atomic<int> counter{0};
  name_ = "gpuex_t_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  auto admin = store::PgConnection::connect(with_database(test_dsn(), "postgres"));
  admin.exec_script("DROP DATABASE IF EXISTS " + name_);
  admin.exec_script("CREATE DATABASE " + name_);
  dsn_ = with_database(test_dsn(), name_);
}

TestDatabase::~TestDatabase() {
  try {
    auto admin = store::PgConnection::connect(with_database(test_dsn(), "postgres"));
    admin.exec_script("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  } catch (const std::exception&) {
    // The cluster may be down on purpose in this test; scripts/test starts from a clean slate anyway.
  }
}

RunResult run_gpuexd(std::vector<std::string> args) {
  args.insert(args.begin(), GPUEX_GPUEXD_PATH);
  return run_command(std::move(args));
}

CreatedAccount create_account(const std::string& dsn, const std::string& name, const std::string& scopes) {
  auto r = run_gpuexd({"admin", "create-account", "--dsn", dsn, "--name", name, "--scopes", scopes});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // One JSON line on stdout; the log lines beside it (stderr, same file here) are not JSON objects.
  auto start = r.output.find("{\"account_id\"");
  REQUIRE(start != std::string::npos);
  auto json = boost::json::parse(r.output.substr(start, r.output.find('\n', start) - start)).as_object();
  return {std::string(json.at("account_id").as_string()), std::string(json.at("key_id").as_string()),
          std::string(json.at("api_key").as_string())};
}

std::vector<std::pair<std::string, std::string>> bearer(const std::string& key) {
  return {{"Authorization", "Bearer " + key}};
}

Gpuexd::Gpuexd(const std::string& dsn, std::vector<std::string> extra_args, bool migrate_first) {
  if (migrate_first) {
    auto migrated = run_gpuexd({"migrate", "--dsn", dsn});
    INFO(migrated.output);
    REQUIRE(migrated.exit_code == 0);
  }
  std::string port_file = scratch_path("gpuexd.port");
  std::vector<std::string> argv = {GPUEX_GPUEXD_PATH, "serve",           "--dsn", dsn,
                                   "--listen",        "127.0.0.1:0",     "--port-file", port_file,
                                   "--health-interval-ms", "100", "--shutdown-grace-s", "5",
                                   // a small reserve: tests start gpuexd ~100 times (the path is the same)
                                   "--engine-heap-mib", "16"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_ = std::make_unique<Process>(argv, scratch_path("gpuexd.log"));

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (port_ == 0) {
    std::ifstream in(port_file);
    unsigned port = 0;
    if (in >> port && port > 0) port_ = static_cast<unsigned short>(port);
    if (port_ == 0) {
      if (!process_->running()) FAIL("gpuexd exited before listening:\n" << process_->log());
      if (std::chrono::steady_clock::now() > deadline) FAIL("gpuexd did not listen within 60 s:\n" << process_->log());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (!wait_for_status(port_, "/healthz", 200, std::chrono::seconds(10))) {
    FAIL("gpuexd does not answer /healthz:\n" << process_->log());
  }
}

Gpuexd::~Gpuexd() {
  if (process_ && process_->running()) stop(5);
}

int Gpuexd::stop(int timeout_s) {
  process_->signal(SIGTERM);
  auto code = process_->wait(std::chrono::seconds(timeout_s));
  return code ? *code : -1;
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string at(std::int64_t unix_seconds) { return gpuex::format_rfc3339(unix_seconds); }

TestExchange::TestExchange() { REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0); }

CreatedAccount TestExchange::account(const std::string& name, const std::string& scopes) const {
  return create_account(db.dsn(), name, scopes);
}

void TestExchange::start(std::vector<std::string> args) {
  if (std::find(args.begin(), args.end(), "--tick-ms") == args.end()) args.insert(args.end(), {"--tick-ms", "100"});
  server = std::make_unique<Gpuexd>(db.dsn(), std::move(args), false);
  http = std::make_unique<HttpClient>(server->port());
}

HttpReply TestExchange::call(const CreatedAccount& who, const std::string& method, const std::string& path,
                             const boost::json::value& body) {
  return http->request(method, path, body.is_null() ? "" : boost::json::serialize(body), bearer(who.api_key));
}

std::pair<std::string, std::string> stopped_at(const std::string& log) {
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("engine stopped at seq (\\d+), state digest ([0-9a-f]+)")));
  return {m[1].str(), m[2].str()};
}

std::pair<std::string, std::string> recovered_at(const std::string& log) {
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("recovered the engine .* at seq (\\d+), state digest ([0-9a-f]+)")));
  return {m[1].str(), m[2].str()};
}

}  // namespace gpuex::test
