// See bench_support.hpp.
#include "bench/support/bench_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <stdexcept>
#include <thread>

#include "server/store/connection.hpp"
#include "support/process.hpp"

namespace gpuex::bench {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;

std::string getenv_or_die(const char* name, const std::string& bench) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    std::fprintf(stderr, "%s is not set: run through scripts/bench %s\n", name, bench.c_str());
    std::exit(2);
  }
  return v;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  if (pclose(p) != 0) throw std::runtime_error("failed: " + cmd + "\n" + out);
  return out;
}

std::string fresh_database(const std::string& bench_dsn, const std::string& name, const std::string& gpuexd) {
  const std::string base = bench_dsn.substr(0, bench_dsn.rfind('/'));
  {
    auto admin = store::PgConnection::connect(base + "/postgres");
    admin.exec_script("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    admin.exec_script("CREATE DATABASE " + name);
  }
  std::string dsn = base + "/" + name;
  run(gpuexd + " migrate --dsn " + dsn + " 2>/dev/null");
  return dsn;
}

boost::json::object create_account(const std::string& gpuexd, const std::string& dsn, const std::string& name,
                                   const std::string& scopes) {
  auto out = run(gpuexd + " admin create-account --dsn " + dsn + " --name " + name + " --scopes " + scopes +
                 " 2>/dev/null");
  return boost::json::parse(out).as_object();
}

pid_t Server::pid() const { return process_ ? process_->pid() : -1; }

double cpu_seconds(pid_t pid) {
  std::string path = pid == 0 ? std::string("/proc/self/stat") : "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  char buf[1024];
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // Fields after the command's closing parenthesis: state (3), ..., utime (14), stime (15).
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) return 0;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

Server::Server(const std::string& gpuexd, const std::string& dsn, const std::string& tag,
               std::vector<std::string> extra) {
  std::string stem = "/tmp/gpuex-bench-" + tag + "-" + std::to_string(::getpid());
  std::string port_file = stem + ".port";
  log_path_ = stem + ".log";
  std::vector<std::string> args = {gpuexd, "--log-level", "warn", "serve", "--dsn", dsn, "--listen", "127.0.0.1:0",
                                   "--port-file", port_file};
  args.insert(args.end(), extra.begin(), extra.end());
  std::remove(log_path_.c_str());
  // A child that dies with us (test::Process): a bench killed or crashed leaves no gpuexd behind.
  process_ = std::make_unique<test::Process>(std::move(args), log_path_);
  for (int i = 0; i < 600 && port_ == 0; ++i) {
    std::ifstream in(port_file);
    unsigned p = 0;
    if (in >> p) port_ = static_cast<unsigned short>(p);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::remove(port_file.c_str());
  if (port_ == 0) {
    stop();
    throw std::runtime_error("gpuexd did not start; see " + log_path_);
  }
}

Server::~Server() { stop(); }

void Server::stop() {
  if (!process_) return;
  process_->signal(SIGTERM);
  const std::optional<int> code = process_->wait(std::chrono::seconds(120));
  if (!code) {
    std::fprintf(stderr, "gpuexd did not stop within 120 s of SIGTERM: killed (see %s)\n", log_path_.c_str());
  } else if (*code != 0) {
    std::fprintf(stderr, "gpuexd exited with status %d (see %s)\n", *code, log_path_.c_str());
  } else if (port_ != 0) {
    std::remove(log_path_.c_str());  // a run that started and stopped cleanly: nothing in it to keep
  }
  process_.reset();  // kills it if still running
}

struct Connection::Impl {
  net::io_context ioc;
  net::ip::tcp::socket socket{ioc};
  beast::flat_buffer buffer;
};

Connection::Connection(unsigned short port) : impl_(new Impl) {
  impl_->socket.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  impl_->socket.set_option(net::ip::tcp::no_delay(true));
}

Connection::~Connection() { delete impl_; }

std::pair<unsigned, std::string> Connection::call(const std::string& method, const std::string& target,
                                                  const std::string& key, const std::string& body) {
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  if (!key.empty()) req.set(bhttp::field::authorization, "Bearer " + key);
  if (!body.empty()) req.set(bhttp::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  bhttp::write(impl_->socket, req);
  bhttp::response<bhttp::string_body> res;
  bhttp::read(impl_->socket, impl_->buffer, res);
  return {res.result_int(), std::move(res.body())};
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

std::int64_t metric(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([0-9]+)"))) return 0;
  return std::stoll(m[1]);
}

long raise_open_files() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  getrlimit(RLIMIT_NOFILE, &r);
  return static_cast<long>(r.rlim_cur);
}

}  // namespace gpuex::bench
