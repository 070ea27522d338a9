// bench_ws: fan-out of book deltas over /v1/ws. N subscribers (one client thread, async) follow one
// book while a driver makes a steady stream of book changes through the HTTP API (asks placed and
// cancelled at distinct prices, each change one committed delta). Reports the messages delivered
// per second to all subscribers together and the delay from publish (the message's `ts`, set right
// after the commit) to receipt. Run with `scripts/bench ws [--subscribers N] [--changes-per-s R]
// [--seconds S] [--json]`.
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <thread>

#include "bench/support/bench_support.hpp"
#include "server/rfc3339.hpp"

namespace {

using namespace gpuex::bench;
namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kMarket = "H100-SXM-80G";

struct Options {
  int subscribers = 1000;
  int changes_per_s = 400;
  int seconds = 20;
  int warmup_seconds = 3;
  bool json = false;
};

std::int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What all subscribers saw; touched only by the client thread.
struct Tally {
  bool measuring = false;
  std::uint64_t messages = 0;  // channel messages received while measuring
  std::uint64_t snapshots = 0;
  std::uint64_t gaps = 0;      // a delta whose seq did not follow the last one
  std::uint64_t ended = 0;     // connections the server closed
  std::vector<double> delays_ms;
};

// One subscriber: Beast for the upgrade and the subscribe message, then the server's frames straight
// from the socket. A server's frames are unmasked (RFC 6455 §5.2), so a read of many frames is taken
// apart in place: one read and one handler call per arrival instead of one Beast read per message
// (the client must not be the bottleneck it measures). Control frames: a close ends the subscriber;
// the server sends no pings.
class Subscriber : public std::enable_shared_from_this<Subscriber> {
 public:
  Subscriber(net::io_context& ioc, Tally& tally) : ws_(ioc), tally_(tally), buffer_(64 * 1024) {}

  void start(unsigned short port, const std::string& channel) {
    subscribe_ = R"({"op":"subscribe","channels":[")" + channel + "\"]}";
    auto self = shared_from_this();
    beast::get_lowest_layer(ws_).async_connect(
        net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port), [self](beast::error_code ec) {
          if (ec) return self->fail("connect", ec);
          self->ws_.async_handshake("127.0.0.1", "/v1/ws", [self](beast::error_code e) {
            if (e) return self->fail("handshake", e);
            self->ws_.async_write(net::buffer(self->subscribe_), [self](beast::error_code w, std::size_t) {
              if (w) return self->fail("subscribe", w);
              self->read();  // nothing came before the subscribe, so Beast buffered nothing
            });
          });
        });
  }

 private:
  void fail(const char* what, beast::error_code ec) {
    ++tally_.ended;
    if (tally_.ended <= 3) std::fprintf(stderr, "subscriber %s failed: %s\n", what, ec.message().c_str());
  }

  void read() {
    if (buffer_.size() - have_ < 4096) buffer_.resize(buffer_.size() * 2);
    beast::get_lowest_layer(ws_).socket().async_read_some(
        net::buffer(buffer_.data() + have_, buffer_.size() - have_),
        [self = shared_from_this()](beast::error_code ec, std::size_t n) {
          if (ec) return self->fail("read", ec);
          self->have_ += n;
          if (self->take_frames()) self->read();
        });
  }

  // Handles every complete frame in the buffer, keeps a partial one; false once the server closed.
  bool take_frames() {
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data());
    std::size_t at = 0;
    const std::int64_t now = wall_us();
    while (have_ - at >= 2) {
      std::uint64_t len = p[at + 1] & 0x7F;
      std::size_t header = 2;
      if (len == 126) {
        if (have_ - at < 4) break;
        len = std::uint64_t{p[at + 2]} << 8 | p[at + 3];
        header = 4;
      } else if (len == 127) {
        if (have_ - at < 10) break;
        len = 0;
        for (std::size_t i = 0; i < 8; ++i) len = len << 8 | p[at + 2 + i];
        header = 10;
      }
      if (have_ - at < header + len) break;
      unsigned opcode = p[at] & 0x0F;
      if (opcode == 8) {
        fail("read", beast::websocket::error::closed);
        return false;
      }
      if (opcode == 1) on_message(std::string_view(buffer_.data() + at + header, len), now);
      at += header + len;
    }
    std::memmove(buffer_.data(), buffer_.data() + at, have_ - at);
    have_ -= at;
    return true;
  }

  // A light scan instead of a JSON parse: the client must not be the bottleneck it measures.
  static std::int64_t field(std::string_view text, std::string_view name) {
    auto at = text.find(name);
    if (at == std::string_view::npos) return -1;
    std::int64_t v = -1;
    auto p = text.data() + at + name.size();
    std::from_chars(p, text.data() + text.size(), v);
    return v;
  }

  void on_message(std::string_view text, std::int64_t now) {
    if (text.find(R"("type":"delta")") != std::string_view::npos) {
      auto seq = field(text, R"("seq":)");
      if (last_seq_ >= 0 && seq != last_seq_ + 1) ++tally_.gaps;
      last_seq_ = seq;
      if (tally_.measuring) {
        ++tally_.messages;
        tally_.delays_ms.push_back(static_cast<double>(now - field(text, R"("ts":)") * 1000) / 1000.0);
      }
    } else if (text.find(R"("type":"snapshot")") != std::string_view::npos) {
      last_seq_ = field(text, R"("seq":)");
      ++tally_.snapshots;
    } else if (text.find(R"("type":"heartbeat")") != std::string_view::npos && tally_.measuring) {
      ++tally_.messages;
    }
  }

  websocket::stream<beast::tcp_stream> ws_;
  Tally& tally_;
  std::vector<char> buffer_;
  std::size_t have_ = 0;
  std::string subscribe_;
  std::int64_t last_seq_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") opt.json = true;
    else if (a == "--subscribers" && i + 1 < argc) opt.subscribers = std::stoi(argv[++i]);
    else if (a == "--changes-per-s" && i + 1 < argc) opt.changes_per_s = std::stoi(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) opt.seconds = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_ws [--subscribers N] [--changes-per-s R] [--seconds S] [--json]\n");
      return 2;
    }
  }
  auto log = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  long files = raise_open_files();
  log("open files limit raised to " + std::to_string(files) + " (gpuexd inherits it)");
  if (files < opt.subscribers + 200) {
    log("not enough file descriptors for " + std::to_string(opt.subscribers) + " subscribers");
    return 1;
  }
  const std::string gpuexd = getenv_or_die("GPUEX_GPUEXD", "ws");
  const std::string dsn = fresh_database(getenv_or_die("GPUEX_BENCH_DSN", "ws"), "gpuex_bench_ws", gpuexd);
  auto admin = create_account(gpuexd, dsn, "ops", "admin");
  auto provider = create_account(gpuexd, dsn, "provider", "provide,read");
  const std::string key(provider.at("api_key").as_string());

  std::string conns = std::to_string(opt.subscribers + 100);
  log("limits raised for the benchmark: --max-connections(-per-ip) " + conns +
      ", --ip-rate/--ip-burst and --key-rate/--key-burst 1e9, the provider's exposure limits 10M orders");
  Server server(gpuexd, dsn, "ws", {"--max-connections", conns, "--max-connections-per-ip", conns, "--ip-rate",
                                    "1000000000", "--ip-burst", "1000000000", "--key-rate", "1000000000",
                                    "--key-burst", "1000000000"});
  std::string pool;
  {
    Connection c(server.port());
    c.call("PUT", "/v1/accounts/" + std::string(provider.at("account_id").as_string()) + "/limits",
           std::string(admin.at("api_key").as_string()),
           R"({"max_open_gpus": 100000000, "max_open_notional": "1000000000000", "max_open_orders": 10000000})");
    auto r = c.call("POST", "/v1/pools", key,
                    json::serialize(json::object{{"market", kMarket}, {"region", "DE"}, {"tier", "bare_metal"},
                                                 {"gpus_per_node", 64}, {"nodes", 100000}, {"pue", "1.3"},
                                                 {"renewable_pct", 40}, {"carbon_g_per_kwh", 300}}));
    if (r.first != 201) {
      log("pool registration failed: " + r.second);
      return 1;
    }
    pool = std::string(json::parse(r.second).at("id").as_string());
  }

  // Subscribers, all on one client thread.
  net::io_context ioc;
  Tally tally;
  const std::string channel = std::string("book:") + kMarket + ":spot";
  std::vector<std::shared_ptr<Subscriber>> subs;
  for (int i = 0; i < opt.subscribers; ++i) {
    subs.push_back(std::make_shared<Subscriber>(ioc, tally));
    subs.back()->start(server.port(), channel);
  }
  auto work = net::make_work_guard(ioc);
  std::thread client([&ioc] { ioc.run(); });
  auto wait_start = Clock::now();
  while (Clock::now() - wait_start < std::chrono::seconds(60)) {
    std::promise<std::uint64_t> p;
    net::post(ioc, [&] { p.set_value(tally.snapshots + tally.ended); });
    if (p.get_future().get() >= static_cast<std::uint64_t>(opt.subscribers)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  log(std::to_string(opt.subscribers) + " subscribers on " + channel);

  // The driver: asks placed and cancelled at distinct prices, paced to changes_per_s.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> changes{0}, errors{0};
  std::vector<std::thread> drivers;
  const int driver_threads = 4;
  auto now_s = [] { return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count(); };
  for (int d = 0; d < driver_threads; ++d) {
    drivers.emplace_back([&, d] {
      Connection c(server.port());
      const std::string start = gpuex::format_rfc3339(now_s()), end = gpuex::format_rfc3339(now_s() + 30 * 86400);
      auto period = std::chrono::duration<double>(static_cast<double>(driver_threads) / opt.changes_per_s);
      // Each connection a quarter period after the one before: a steady stream, not four changes at once.
      auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(period * d / driver_threads);
      std::vector<std::string> resting;
      int n = 0;
      while (!stop) {
        next += std::chrono::duration_cast<Clock::duration>(period);
        std::this_thread::sleep_until(next);
        std::pair<unsigned, std::string> r;
        if (resting.size() < 50 || (n % 2 == 1 && !resting.empty())) {
          char price[16];
          std::snprintf(price, sizeof price, "3.%04d", (d * 2500 + n) % 10000);
          r = c.call("POST", "/v1/orders", key,
                     R"({"side":"sell","pool_id":")" + pool + R"(","price":")" + price + R"(","quantity":1,"start":")" +
                         start + R"(","end":")" + end + "\"}");
          if (r.first == 201) resting.emplace_back(json::parse(r.second).at("order").at("id").as_string());
        } else {
          r = c.call("DELETE", "/v1/orders/" + resting.front(), key);
          resting.erase(resting.begin());
        }
        ++n;
        if (r.first >= 300) ++errors;
        else ++changes;
      }
    });
  }

  auto snapshot_metrics = [&] {
    Connection c(server.port());
    return c.call("GET", "/metrics", "").second;
  };
  std::this_thread::sleep_for(std::chrono::seconds(opt.warmup_seconds));
  std::string before = snapshot_metrics();
  net::post(ioc, [&] { tally.measuring = true; });
  auto t0 = Clock::now();
  auto changes0 = changes.load();
  std::this_thread::sleep_for(std::chrono::seconds(opt.seconds));
  std::promise<void> off;
  net::post(ioc, [&] {
    tally.measuring = false;
    off.set_value();
  });
  off.get_future().get();
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  auto changes1 = changes.load();
  std::string after = snapshot_metrics();
  stop = true;
  for (auto& t : drivers) t.join();
  work.reset();
  ioc.stop();
  client.join();
  server.stop();

  double per_s = static_cast<double>(tally.messages) / elapsed;
  double changes_per_s = static_cast<double>(changes1 - changes0) / elapsed;
  double p50 = percentile(tally.delays_ms, 0.50), p99 = percentile(tally.delays_ms, 0.99),
         p999 = percentile(tally.delays_ms, 0.999);
  auto slow = metric(after, "gpuex_ws_slow_consumers_total") - metric(before, "gpuex_ws_slow_consumers_total");
  auto deliveries = metric(after, "gpuex_ws_deliveries_total") - metric(before, "gpuex_ws_deliveries_total");
  auto writes = metric(after, "gpuex_ws_writes_total") - metric(before, "gpuex_ws_writes_total");
  double frames_per_write = writes > 0 ? static_cast<double>(deliveries) / static_cast<double>(writes) : 0;
  char workload[320];
  std::snprintf(workload, sizeof workload,
                "ws: %d subscribers to %s, book changes through the HTTP API at %d/s (asks placed and cancelled, "
                "4 driver connections), %d s after %d s warm-up; delay = receipt - ts (ms resolution)",
                opt.subscribers, channel.c_str(), opt.changes_per_s, opt.seconds, opt.warmup_seconds);
  if (opt.json) {
    std::cout << json::serialize(json::object{{"workload", workload},
                                              {"subscribers", opt.subscribers},
                                              {"messages_per_s", static_cast<std::int64_t>(std::round(per_s))},
                                              {"p50_ms", p50},
                                              {"p99_ms", p99},
                                              {"p999_ms", p999},
                                              {"book_changes_per_s", static_cast<std::int64_t>(std::round(changes_per_s))},
                                              {"gaps", tally.gaps},
                                              {"disconnected", tally.ended},
                                              {"slow_consumers_closed", slow},
                                              {"frames_per_write", std::round(frames_per_write * 100) / 100},
                                              {"driver_errors", errors.load()}})
              << "\n";
  } else {
    std::printf("%s\n", workload);
    std::printf("  messages delivered/s  %10.0f   (%llu in %.1f s, all subscribers together)\n", per_s,
                static_cast<unsigned long long>(tally.messages), elapsed);
    std::printf("  book changes/s        %10.0f   (committed through the API)\n", changes_per_s);
    std::printf("  delay publish->recv   p50 %.2f ms   p99 %.2f ms   p99.9 %.2f ms\n", p50, p99, p999);
    std::printf("  frames per socket write %.2f (server: channel messages queued / gather writes)\n",
                frames_per_write);
    std::printf("  seq gaps %llu, connections ended %llu, slow consumers closed %lld, driver errors %llu\n",
                static_cast<unsigned long long>(tally.gaps), static_cast<unsigned long long>(tally.ended),
                static_cast<long long>(slow), static_cast<unsigned long long>(errors.load()));
  }
  return 0;
}
