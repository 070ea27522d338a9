// bench_e2e: orders per second acknowledged after commit, and latency from send to durable ack, beside
// the rate at which PostgreSQL itself commits the same rows in the same batches.
//
// Workload (10 markets): ~80 % resting bids and asks, ~10 % crossing (ioc orders that trade), ~10 %
// cancels of the connection's own resting orders; providers and buyers on separate keep-alive
// connections. Run with `scripts/bench e2e [--connections N] [--seconds S] [--json]`, which provides a
// private PostgreSQL (GPUEX_BENCH_DSN) and the gpuexd to start (GPUEX_GPUEXD).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <cstdio>
#include <iostream>
#include <random>
#include <thread>

#include "bench/support/bench_support.hpp"
#include "server/rfc3339.hpp"
#include "matching/engine.hpp"
#include "server/analytics/rollups.hpp"
#include "server/store/command_codec.hpp"
#include "server/store/connection.hpp"
#include "server/store/writer.hpp"

namespace {

using namespace gpuex::bench;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

const char* kMarkets[] = {"H100-SXM-80G", "H100-PCIE-80G", "H200-SXM-141G", "H200-NVL-141G", "B200-180G",
                          "A100-SXM-80G", "A100-PCIE-80G", "L40S-48G",     "RTX4090-24G",   "V100-SXM2-32G"};

struct Options {
  int connections = 32;
  int seconds = 20;
  int warmup_seconds = 3;
  bool json = false;
  bool blocking_client = false;  // one blocking thread per connection (the client of rows up to 2026-11-29)
};

// The client: every connection in one thread around epoll, each with one request outstanding (so
// the same closed loop as one blocking thread per connection, without 128 threads to schedule).
// A request is sent whole (non-blocking write, the rest when the socket is writable); the answer is
// read until its Content-Length is complete. Latency runs from the send to the last byte of the answer.
using NextRequest = std::function<void(std::size_t, std::string&, std::string&, std::string&, std::string&)>;
using Answered = std::function<void(std::size_t, unsigned, std::string_view, double)>;
void event_loop_client(unsigned short port, std::size_t connections, const std::atomic<bool>& stop, const NextRequest& next,
                       const Answered& answered, const std::function<void(std::size_t)>& failed) {
  struct Conn {
    int fd = -1;
    std::string out, in;
    std::size_t sent = 0;
    Clock::time_point t0;
    bool open = true;
  };
  int ep = epoll_create1(0);
  if (ep < 0) throw std::runtime_error("epoll_create1 failed");
  std::vector<Conn> conns(connections);
  std::string method, target, body, key;
  auto close_conn = [&](std::size_t i) {
    if (!conns[i].open) return;
    conns[i].open = false;
    ::close(conns[i].fd);
    failed(i);
  };
  auto send_more = [&](std::size_t i) {
    auto& c = conns[i];
    while (c.sent < c.out.size()) {
      ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.u64 = i;
        epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        return;
      }
      if (n <= 0) return close_conn(i);
      c.sent += static_cast<std::size_t>(n);
    }
  };
  auto start_request = [&](std::size_t i) {
    auto& c = conns[i];
    next(i, method, target, body, key);
    c.out.clear();
    c.out += method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key + "\r\n";
    if (!body.empty()) c.out += "Content-Type: application/json\r\n";
    if (!body.empty() || method == "POST" || method == "PUT") c.out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    c.out += "\r\n";
    c.out += body;
    c.sent = 0;
    c.in.clear();
    c.t0 = Clock::now();
    send_more(i);
  };
  for (std::size_t i = 0; i < connections; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("connect to gpuexd failed");
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    conns[i].fd = fd;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  for (std::size_t i = 0; i < connections; ++i) start_request(i);
  std::vector<epoll_event> events(connections);
  char buf[65536];
  while (!stop) {
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    for (int k = 0; k < n; ++k) {
      std::size_t i = events[k].data.u64;
      auto& c = conns[i];
      if (!c.open) continue;
      if (events[k].events & EPOLLOUT) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        send_more(i);
        if (!c.open) continue;
      }
      if (!(events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      for (;;) {
        ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (r <= 0) {
          close_conn(i);
          break;
        }
        c.in.append(buf, static_cast<std::size_t>(r));
        if (static_cast<std::size_t>(r) < sizeof buf) break;
      }
      if (!c.open) continue;
      // A whole answer: the head, then Content-Length bytes of body (gpuexd always sends it).
      auto head_end = c.in.find("\r\n\r\n");
      if (head_end == std::string::npos) continue;
      std::string_view head(c.in.data(), head_end);
      std::size_t length = 0;
      for (std::size_t pos = head.find("\r\n"); pos != std::string_view::npos; pos = head.find("\r\n", pos + 2)) {
        auto line = head.substr(pos + 2, head.find("\r\n", pos + 2) - (pos + 2));
        constexpr std::string_view kLength = "content-length:";
        if (line.size() > kLength.size() &&
            std::equal(kLength.begin(), kLength.end(), line.begin(),
                       [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); })) {
          length = std::stoul(std::string(line.substr(kLength.size())));
        }
      }
      if (c.in.size() < head_end + 4 + length) continue;
      double ms = std::chrono::duration<double, std::milli>(Clock::now() - c.t0).count();
      unsigned status = head.size() >= 12 ? static_cast<unsigned>(std::stoi(std::string(head.substr(9, 3)))) : 0;
      answered(i, status, std::string_view(c.in).substr(head_end + 4, length), ms);
      start_request(i);
    }
  }
  for (auto& c : conns) {
    if (c.open) ::close(c.fd);
  }
  ::close(ep);
}

// PostgreSQL's own ceiling: the rate at which one connection commits the rows the writer wrote in this
// run, in transactions of the run's mean size. The logged commands are replayed through a fresh engine
// (before the clock starts) to get their events, and handed in transactions of that size to a real
// store::Writer (the analytics rollups included) writing into a fresh database. So the ceiling always
// writes exactly what the writer writes, the way it writes it, with no HTTP and no engine.
double db_ceiling(const std::string& bench_dsn, const std::string& run_dsn, const std::string& gpuexd, double per_tx,
                  int seconds) {
  using namespace gpuex;
  auto run_db = store::PgConnection::connect(run_dsn);
  matching::EngineConfig config;
  auto markets = run_db.exec("SELECT id, tick_size_micros, round(perf_factor * 1000)::int FROM markets ORDER BY id");
  for (int i = 0; i < markets.rows(); ++i) {
    config.markets.push_back(matching::MarketSpec{matching::MarketId{std::string(markets.text(i, 0))},
                                                  matching::Price(markets.integer(i, 1)),
                                                  static_cast<std::int32_t>(markets.integer(i, 2))});
  }
  matching::Engine engine(config);
  store::Batch commands;
  for (matching::Seq last = 0;;) {
    auto rows = run_db.exec("SELECT seq, at, account_id, kind, body::text FROM engine_commands WHERE seq > $1 "
                            "ORDER BY seq LIMIT 10000",
                            {std::to_string(last)});
    if (rows.rows() == 0) break;
    for (int i = 0; i < rows.rows(); ++i) {
      store::LoggedCommand logged;
      logged.command.seq = last = rows.integer(i, 0);
      logged.command.now = matching::Seconds(rows.integer(i, 1));
      logged.command.account = matching::AccountId(rows.integer(i, 2));
      logged.command.body = store::command_body_from_json(rows.text(i, 3), json::parse(rows.text(i, 4)).as_object());
      engine.apply(logged.command, logged.events);
      commands.push_back(std::move(logged));
    }
  }
  // A fresh database with the run's accounts (the rows refer to them).
  const std::string dsn = fresh_database(bench_dsn, "gpuex_bench_e2e_ceiling", gpuexd);
  auto db = store::PgConnection::connect(dsn);
  auto accounts = run_db.exec("SELECT id, name FROM accounts ORDER BY id");
  for (int i = 0; i < accounts.rows(); ++i) {
    db.exec("INSERT INTO accounts (id, name) VALUES ($1, $2)",
            {std::string(accounts.text(i, 0)), std::string(accounts.text(i, 1))});
  }
  analytics::Rollups rollups;
  store::Writer writer(dsn, [](const std::string& why) { std::fprintf(stderr, "ceiling: a commit failed: %s\n", why.c_str()); },
                       1);
  writer.add_transaction_part(rollups);
  writer.start();

  // Transactions of the run's mean size, a few queued ahead, until the time is up.
  std::mutex mutex;
  std::condition_variable wake;
  std::size_t committed = 0, submitted = 0, next = 0, written = 0;
  double tx_carry = 0;
  auto started = Clock::now();
  auto deadline = started + std::chrono::seconds(seconds);
  while (Clock::now() < deadline && next < commands.size()) {
    tx_carry += per_tx;
    auto n = std::min(static_cast<std::size_t>(tx_carry), commands.size() - next);
    tx_carry -= static_cast<double>(static_cast<std::size_t>(tx_carry));
    if (n == 0) continue;
    store::Batch batch;
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) batch.push_back(std::move(commands[next + i]));
    batch.back().done = [&](const matching::EventSink*) {
      std::lock_guard lock(mutex);
      ++committed;
      wake.notify_all();
    };
    next += n;
    written += n;
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] { return submitted - committed < 4; });
      ++submitted;
    }
    writer.submit(std::move(batch));
  }
  writer.wait_idle();
  double secs = std::chrono::duration<double>(Clock::now() - started).count();
  return static_cast<double>(written) / secs;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") opt.json = true;
    else if (a == "--connections" && i + 1 < argc) opt.connections = std::stoi(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) opt.seconds = std::stoi(argv[++i]);
    else if (a == "--blocking-client") opt.blocking_client = true;
    else {
      std::fprintf(stderr, "usage: bench_e2e [--connections N] [--seconds S] [--json] [--blocking-client]\n");
      return 2;
    }
  }
  const std::string gpuexd = getenv_or_die("GPUEX_GPUEXD", "e2e");
  const std::string dsn = fresh_database(getenv_or_die("GPUEX_BENCH_DSN", "e2e"), "gpuex_bench_e2e", gpuexd);
  auto log = [&](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  auto create = [&](const std::string& name, const std::string& scopes) { return create_account(gpuexd, dsn, name, scopes); };
  auto admin = create("ops", "admin");
  std::vector<json::object> accounts;
  for (int c = 0; c < opt.connections; ++c) {
    accounts.push_back(create("acct" + std::to_string(c), c % 2 == 0 ? "provide,read" : "trade,read"));
  }

  log("limits raised for the benchmark: --key-rate/--key-burst/--ip-rate/--ip-burst 1e9, exposure limits 10M orders per account");
  Server server(gpuexd, dsn, "e2e", {"--key-rate", "1000000000", "--key-burst", "1000000000", "--ip-rate", "1000000000",
                                     "--ip-burst", "1000000000"});
  const unsigned short port = server.port();

  // Set-up: raised exposure limits, one pool per market per provider.
  std::vector<std::vector<std::string>> pools(accounts.size());
  {
    Connection c(port);
    std::string admin_key(admin.at("api_key").as_string());
    for (std::size_t i = 0; i < accounts.size(); ++i) {
      std::string id(accounts[i].at("account_id").as_string());
      c.call("PUT", "/v1/accounts/" + id + "/limits", admin_key,
             R"({"max_open_gpus": 100000000, "max_open_notional": "1000000000000", "max_open_orders": 10000000})");
      if (i % 2 != 0) continue;
      for (const char* m : kMarkets) {
        auto r = c.call("POST", "/v1/pools", std::string(accounts[i].at("api_key").as_string()),
                        json::serialize(json::object{{"market", m}, {"region", "DE"}, {"tier", "bare_metal"},
                                                     {"gpus_per_node", 64}, {"nodes", 10000}, {"pue", "1.3"},
                                                     {"renewable_pct", 40}, {"carbon_g_per_kwh", 300}}));
        if (r.first != 201) {
          log("pool registration failed: " + r.second);
          return 1;
        }
        pools[i].emplace_back(json::parse(r.second).at("id").as_string());
      }
    }
  }

  std::atomic<bool> measuring{false};
  std::vector<std::vector<double>> latencies(accounts.size());
  std::vector<std::int64_t> errors(accounts.size(), 0);
  auto now_s = [] { return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(); };
  // One connection's workload: the same choice of request for both clients (seeded per connection).
  struct Workload {
    std::mt19937 rng;
    bool provider;
    std::string key;
    const std::vector<std::string>* pools;
    std::vector<std::string> resting;
    std::string start, end;
    bool rests = false;
    // The next request's method, target and body.
    void next(std::string& method, std::string& target, std::string& body) {
      int roll = static_cast<int>(rng() % 100);
      target = "/v1/orders", body.clear();
      method = "POST";
      rests = false;
      std::size_t mi = rng() % 10;
      char price[16];
      if (roll < 10 && !resting.empty()) {
        std::size_t k = rng() % resting.size();
        target += "/" + resting[k];
        resting[k] = resting.back();
        resting.pop_back();
        method = "DELETE";
      } else if (roll < 20) {
        // Crossing: takes from the other side's resting orders, the rest cancelled (ioc).
        if (provider) {
          std::snprintf(price, sizeof price, "0.%04d", 5000 + static_cast<int>(rng() % 5000));
          body = R"({"side":"sell","pool_id":")" + (*pools)[mi] + R"(","price":")" + price +
                 R"(","quantity":1,"time_in_force":"ioc","start":")" + start + R"(","end":")" + end + "\"}";
        } else {
          body = std::string(R"({"side":"buy","market":")") + kMarkets[mi] +
                 R"(","price":"9.0000","quantity":1,"duration":3600,"time_in_force":"ioc"})";
        }
      } else {
        rests = true;
        if (provider) {
          std::snprintf(price, sizeof price, "3.%04d", static_cast<int>(rng() % 10000));
          body = R"({"side":"sell","pool_id":")" + (*pools)[mi] + R"(","price":")" + price + R"(","quantity":)" +
                 std::to_string(1 + rng() % 4) + R"(,"start":")" + start + R"(","end":")" + end + "\"}";
        } else {
          std::snprintf(price, sizeof price, "1.%04d", static_cast<int>(rng() % 10000));
          body = std::string(R"({"side":"buy","market":")") + kMarkets[mi] + R"(","price":")" + price +
                 R"(","quantity":)" + std::to_string(1 + rng() % 4) + R"(,"duration":3600})";
        }
      }
    }
    // The answer to that request: a resting order's id is kept for a later cancel.
    void answered(unsigned status, std::string_view body) {
      if (!rests || status != 201) return;
      // {"order":{"id":"123",...: the id without parsing the whole answer (parsed if it looks otherwise).
      constexpr std::string_view kHead = R"({"order":{"id":")";
      if (body.substr(0, kHead.size()) == kHead) {
        auto close = body.find('"', kHead.size());
        if (close != std::string_view::npos) {
          resting.emplace_back(body.substr(kHead.size(), close - kHead.size()));
          return;
        }
      }
      resting.emplace_back(json::parse(body).at("order").at("id").as_string());
    }
  };
  std::vector<Workload> work;
  for (std::size_t i = 0; i < accounts.size(); ++i) {
    work.push_back(Workload{std::mt19937(static_cast<unsigned>(i * 7919 + 1)), i % 2 == 0,
                            std::string(accounts[i].at("api_key").as_string()), &pools[i], {},
                            gpuex::format_rfc3339(now_s()), gpuex::format_rfc3339(now_s() + 30 * 86400)});
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  if (opt.blocking_client) {
    // The client of rows up to 2026-11-29: one blocking thread per connection.
    for (std::size_t i = 0; i < accounts.size(); ++i) {
      threads.emplace_back([&, i] {
        Connection c(port);
        std::string method, target, body;
        while (!stop) {
          work[i].next(method, target, body);
          auto t0 = Clock::now();
          std::pair<unsigned, std::string> r;
          try {
            r = c.call(method, target, work[i].key, body);
          } catch (const std::exception&) {
            ++errors[i];
            return;
          }
          double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          if (measuring) latencies[i].push_back(ms);
          if (r.first >= 400 && r.first != 404) ++errors[i];
          work[i].answered(r.first, r.second);
        }
      });
    }
  } else {
    threads.emplace_back([&] {
      event_loop_client(port, work.size(), stop,
                        [&](std::size_t i, std::string& method, std::string& target, std::string& body, std::string& key) {
                          work[i].next(method, target, body);
                          key = work[i].key;
                        },
                        [&](std::size_t i, unsigned status, std::string_view body, double ms) {
                          if (measuring) latencies[i].push_back(ms);
                          if (status >= 400 && status != 404) ++errors[i];
                          work[i].answered(status, body);
                        },
                        [&](std::size_t i) { ++errors[i]; });
    });
  }

  std::this_thread::sleep_for(std::chrono::seconds(opt.warmup_seconds));
  std::string before;
  {
    Connection c(port);
    before = c.call("GET", "/metrics", "").second;
  }
  measuring = true;
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(opt.seconds));
  measuring = false;
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string after;
  {
    Connection c(port);
    after = c.call("GET", "/metrics", "").second;
  }
  stop = true;
  for (auto& t : threads) t.join();
  server.stop();

  std::vector<double> all;
  std::int64_t errs = 0;
  for (std::size_t i = 0; i < latencies.size(); ++i) {
    all.insert(all.end(), latencies[i].begin(), latencies[i].end());
    errs += errors[i];
  }
  double orders_per_s = static_cast<double>(all.size()) / elapsed;
  double tx = static_cast<double>(metric(after, "gpuex_store_transactions_total") - metric(before, "gpuex_store_transactions_total"));
  double cmds = static_cast<double>(metric(after, "gpuex_store_commands_total") - metric(before, "gpuex_store_commands_total"));
  double rows = static_cast<double>(metric(after, "gpuex_store_rows_total") - metric(before, "gpuex_store_rows_total"));
  double per_tx = tx > 0 ? cmds / tx : 1, rows_per_cmd = cmds > 0 ? rows / cmds : 1;
  double p50 = percentile(all, 0.50), p99 = percentile(all, 0.99), p999 = percentile(all, 0.999);
  log("measuring PostgreSQL's own ceiling for the same rows in the same batches ...");
  double ceiling = db_ceiling(getenv_or_die("GPUEX_BENCH_DSN", "e2e"), dsn, gpuexd, per_tx, 10);

  char workload[256];
  std::snprintf(workload, sizeof workload,
                "e2e: 10 markets, %d keep-alive connections (half providers, half buyers), ~80%% resting, ~10%% "
                "crossing ioc, ~10%% cancels, %d s after %d s warm-up",
                opt.connections, opt.seconds, opt.warmup_seconds);
  if (opt.json) {
    std::cout << json::serialize(json::object{{"workload", workload},
                                              {"orders_per_s", static_cast<std::int64_t>(std::round(orders_per_s))},
                                              {"p50_ms", p50},
                                              {"p99_ms", p99},
                                              {"p999_ms", p999},
                                              {"db_ceiling_orders_per_s", static_cast<std::int64_t>(std::round(ceiling))},
                                              {"commands_per_transaction", per_tx},
                                              {"rows_per_command", rows_per_cmd},
                                              {"errors", errs}})
              << "\n";
  } else {
    std::printf("%s\n", workload);
    std::printf("  durable orders/s      %10.0f   (%zu requests answered after commit)\n", orders_per_s, all.size());
    std::printf("  latency send->ack     p50 %.2f ms   p99 %.2f ms   p99.9 %.2f ms\n", p50, p99, p999);
    std::printf("  store                 %.1f commands per transaction, %.2f rows per command\n", per_tx, rows_per_cmd);
    std::printf("  PostgreSQL ceiling    %10.0f orders/s (same rows, same batches, one connection)\n", ceiling);
    std::printf("  share of ceiling      %9.0f %%\n", ceiling > 0 ? 100 * orders_per_s / ceiling : 0);
    std::printf("  errors                %lld\n", static_cast<long long>(errs));
  }
  return 0;
}
