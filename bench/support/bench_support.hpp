// What the benchmarks that run a real gpuexd share: the environment scripts/bench provides, a fresh
// database on the bench cluster, accounts, a gpuexd process, one blocking HTTP connection, and the
// arithmetic of their reports.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpuex::test {
class Process;
}

namespace gpuex::bench {

// An environment variable scripts/bench sets, or exit(2) with a message naming `bench`.
std::string getenv_or_die(const char* name, const std::string& bench);
// Runs a shell command; its stdout, or throws with the output when it fails.
std::string run(const std::string& cmd);

// A fresh, migrated database `name` next to GPUEX_BENCH_DSN's; returns its DSN.
std::string fresh_database(const std::string& bench_dsn, const std::string& name, const std::string& gpuexd);
// `gpuexd admin create-account`: {account_id, key_id, api_key, ...}.
boost::json::object create_account(const std::string& gpuexd, const std::string& dsn, const std::string& name,
                                   const std::string& scopes);

// A gpuexd serving `dsn` on a free loopback port, its output in a log file under /tmp (removed after a clean
// stop, kept and named on stderr otherwise).
class Server {
 public:
  Server(const std::string& gpuexd, const std::string& dsn, const std::string& tag, std::vector<std::string> extra);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  unsigned short port() const { return port_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const;  // of the running gpuexd
  void stop();  // SIGTERM and wait

 private:
  std::unique_ptr<test::Process> process_;
  unsigned short port_ = 0;
  std::string log_path_;
};

// One blocking keep-alive HTTP connection to 127.0.0.1.
class Connection {
 public:
  explicit Connection(unsigned short port);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  // (status, body); `method` is "GET", "POST", "PUT", "DELETE".
  std::pair<unsigned, std::string> call(const std::string& method, const std::string& target, const std::string& key,
                                        const std::string& body = {});

 private:
  struct Impl;
  Impl* impl_;
};

// CPU seconds (user + system) a process used so far, from /proc/PID/stat (0 for `self`: this one).
double cpu_seconds(pid_t pid);

// The p-quantile (0..1) of `v` (reorders it); 0 when empty.
double percentile(std::vector<double>& v, double p);
// A counter's value in Prometheus text, 0 when absent.
std::int64_t metric(const std::string& text, const std::string& name);
// Raises the soft open-files limit to the hard one (benches with many connections); returns it.
long raise_open_files();

}  // namespace gpuex::bench
