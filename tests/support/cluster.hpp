// The PostgreSQL the integration tests use, and the gpuexd processes they start against it.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "support/http_client.hpp"
#include "support/process.hpp"

namespace gpuex::test {

// GPUEX_TEST_DSN (set by scripts/test to the private test cluster); fails the test when unset.
std::string test_dsn();

// A fresh, empty database on the test cluster, dropped when this goes out of scope.
class TestDatabase {
 public:
  TestDatabase();
  ~TestDatabase();
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;
  const std::string& dsn() const { return dsn_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string dsn_;
};

// A real gpuexd, started on a free loopback port and waited for until /healthz answers.
class Gpuexd {
 public:
  // `extra_args` are appended to `serve`; `migrate_first` runs `gpuexd migrate` before it.
  explicit Gpuexd(const std::string& dsn, std::vector<std::string> extra_args = {}, bool migrate_first = true);
  ~Gpuexd();

  unsigned short port() const { return port_; }
  Process& process() { return *process_; }
  std::string log() const { return process_->log(); }
  // SIGTERM, then the exit code (or -1 if it did not exit within `timeout_s`).
  int stop(int timeout_s = 20);

 private:
  std::unique_ptr<Process> process_;
  unsigned short port_ = 0;
};

// Runs `gpuexd ARGS...` to completion; returns exit code and output.
RunResult run_gpuexd(std::vector<std::string> args);

// `gpuexd admin create-account` on a migrated database: the account's id and its first key.
struct CreatedAccount {
  std::string account_id;
  std::string key_id;
  std::string api_key;
};
CreatedAccount create_account(const std::string& dsn, const std::string& name, const std::string& scopes);

// An Authorization header for `key`.
std::vector<std::pair<std::string, std::string>> bearer(const std::string& key);

// From gpuexd's log: the (seq, state digest) a clean stop logged, and the one recovery logged on start.
std::pair<std::string, std::string> stopped_at(const std::string& log);
std::pair<std::string, std::string> recovered_at(const std::string& log);

// Wall-clock Unix seconds, and a time as the API writes it (RFC 3339 UTC), for order windows.
std::int64_t unix_now();
std::string at(std::int64_t unix_seconds);

// A fresh migrated database and, after start(), a gpuexd serving it with one keep-alive client.
// Fixtures create their accounts between the two.
struct TestExchange {
  TestDatabase db;
  std::unique_ptr<Gpuexd> server;
  std::unique_ptr<HttpClient> http;

  TestExchange();
  CreatedAccount account(const std::string& name, const std::string& scopes) const;
  // `gpuexd serve` with `args` (and `--tick-ms 100` unless they set it).
  void start(std::vector<std::string> args);
  // A request with `who`'s key; a null body sends none.
  HttpReply call(const CreatedAccount& who, const std::string& method, const std::string& path,
                 const boost::json::value& body = nullptr);
};

}  // namespace gpuex::test
