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
#include <liburing.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <sys/mman.h>
#include <thread>
#include <unordered_map>

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
  // The client's wait for arrivals: the kernel wakes it when this many arrived, or after --wait-us
  // with at least one (1: at each first arrival, as before).
  unsigned wait_arrivals = 1;
  long wait_us = 50'000;
};

// Context switches of every thread of process `pid` (0: this one) so far, voluntary + involuntary: a
// wake-up of a thread that slept (most of them, here) is one switch in and one out.
std::uint64_t context_switches(pid_t pid) {
  const std::string dir = pid == 0 ? std::string("/proc/self/task") : "/proc/" + std::to_string(pid) + "/task";
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.starts_with("voluntary_ctxt_switches:") || line.starts_with("nonvoluntary_ctxt_switches:")) {
        total += std::stoull(line.substr(line.find(':') + 1));
      }
    }
  }
  return total;
}

std::int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What all subscribers saw; touched only by the client thread (`measuring` is switched by main).
struct Tally {
  std::atomic<bool> measuring{false};
  std::uint64_t messages = 0;  // channel messages received while measuring
  std::atomic<std::uint64_t> snapshots{0};
  std::uint64_t gaps = 0;      // a delta whose seq did not follow the last one
  std::atomic<std::uint64_t> ended{0};  // connections the server closed, or that failed
  std::vector<double> delays_ms;
  // Per change (a delta's seq, the same for all subscribers): its ts, and when the first and the last
  // subscriber took it in (wall clock µs): where the delay comes from, before the fan-out reaches
  // anyone (commit to first receipt) or within it (first to last receipt).
  struct Change {
    std::int64_t ts_ms = 0;
    std::int64_t first_us = 0;
    std::int64_t last_us = 0;
    std::uint32_t received = 0;
  };
  std::unordered_map<std::int64_t, Change> changes;
};

// One subscriber: Beast for the upgrade and the subscribe message, then the server's frames straight
// from the socket, read by the Receiver (below). A server's frames are unmasked (RFC 6455 §5.2), so
// what one read brings is taken apart in place, however many frames it holds (the client must not
// be the bottleneck it measures). Control frames: a close ends the subscriber; the server sends no pings.
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
              self->subscribed_ = true;  // the Receiver reads from here on; Beast buffered nothing
            });
          });
        });
  }

  bool subscribed() const { return subscribed_ && !ended_; }
  int fd() { return beast::get_lowest_layer(ws_).socket().native_handle(); }

  // What one read brought (`now`: when it was taken, wall clock µs); false once the subscriber ended.
  bool received(const char* data, std::size_t n, std::int64_t now) {
    if (ended_) return false;
    if (buffer_.size() - have_ < n) buffer_.resize(std::max(buffer_.size() * 2, have_ + n));
    std::memcpy(buffer_.data() + have_, data, n);
    have_ += n;
    return take_frames(now);
  }

  void fail(const char* what, beast::error_code ec) {
    if (ended_) return;
    ended_ = true;
    if (++tally_.ended <= 3) std::fprintf(stderr, "subscriber %s failed: %s\n", what, ec.message().c_str());
  }

 private:

  // Handles every complete frame in the buffer, keeps a partial one; false once the server closed.
  bool take_frames(std::int64_t now) {
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data());
    std::size_t at = 0;
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
        const std::int64_t ts = field(text, R"("ts":)");
        tally_.delays_ms.push_back(static_cast<double>(now - ts * 1000) / 1000.0);
        auto& c = tally_.changes[seq];
        if (c.received++ == 0) {
          c.ts_ms = ts;
          c.first_us = now;
        }
        c.last_us = now;
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
  bool subscribed_ = false;
  bool ended_ = false;
};

// Every subscriber's socket after its subscribe, read on one thread through io_uring: one multishot
// recv per socket, armed once, into buffers the kernel takes from a ring of provided buffers, so one
// io_uring_enter waits for and collects the arrivals of many sockets. (With Asio's epoll reactor
// each arrival cost a recv, plus a second one that found the socket empty when the next read was
// started; a system call costs ~1.1 µs on this VM before it does anything.) Task work is deferred
// to our io_uring_enter (DEFER_TASKRUN): the kernel does not interrupt this thread per arrival.
class Receiver {
 public:
  static constexpr unsigned kBuffers = 8192;  // a power of two
  static constexpr unsigned kBufferSize = 2048;
  static constexpr unsigned short kGroup = 1;

  explicit Receiver(std::vector<std::shared_ptr<Subscriber>>& subs) : subs_(subs), data_(std::size_t{kBuffers} * kBufferSize) {
    io_uring_params p{};
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    p.cq_entries = 65536;
    if (int r = io_uring_queue_init_params(1024, &ring_, &p); r < 0) die("io_uring_queue_init_params", r);
    ring_mem_ = mmap(nullptr, kBuffers * sizeof(io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (ring_mem_ == MAP_FAILED) die("mmap", -errno);
    buffers_ = static_cast<io_uring_buf_ring*>(ring_mem_);
    io_uring_buf_ring_init(buffers_);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(ring_mem_);
    reg.ring_entries = kBuffers;
    reg.bgid = kGroup;
    if (int r = io_uring_register_buf_ring(&ring_, &reg, 0); r < 0) die("io_uring_register_buf_ring", r);
    for (unsigned i = 0; i < kBuffers; ++i) give_back(i, static_cast<int>(i));
    io_uring_buf_ring_advance(buffers_, kBuffers);
    for (std::size_t i = 0; i < subs_.size(); ++i) {
      if (!subs_[i]->subscribed()) continue;
      // Blocking again: Asio made the socket non-blocking, and io_uring should wait for data, not fail.
      int fd = subs_[i]->fd();
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      arm(i);
    }
    io_uring_submit(&ring_);
  }
  ~Receiver() {
    io_uring_queue_exit(&ring_);
    munmap(ring_mem_, kBuffers * sizeof(io_uring_buf));
  }
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  // Reads until `stop`; `rounds` counts the batches of completions handled (a batch under way when
  // `measuring` goes off has ended once it moved on).
  void run(const std::atomic<bool>& stop, std::atomic<std::uint64_t>& rounds, unsigned wait_arrivals, long wait_us) {
    while (!stop.load(std::memory_order_relaxed)) {
      __kernel_timespec timeout{wait_us / 1'000'000, (wait_us % 1'000'000) * 1000};
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_submit_and_wait_timeout(&ring_, &cqe, wait_arrivals, &timeout, nullptr);
      if (r < 0 && r != -ETIME && r != -EINTR) die("io_uring_submit_and_wait_timeout", r);
      unsigned head = 0, seen = 0;
      int recycled = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const auto index = static_cast<std::size_t>(io_uring_cqe_get_data64(cqe));
        Subscriber& s = *subs_[index];
        const int res = cqe->res;
        if (cqe->flags & IORING_CQE_F_BUFFER) {
          const unsigned id = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
          if (res > 0) s.received(data_.data() + std::size_t{id} * kBufferSize, static_cast<std::size_t>(res), wall_us());
          give_back(id, recycled++);
        }
        if (res == -ENOBUFS || (res > 0 && !(cqe->flags & IORING_CQE_F_MORE))) {
          if (s.subscribed()) arm(index);  // the multishot recv stopped (out of buffers): the data waits in the socket
        } else if (res == 0) {
          s.fail("read", net::error::eof);
        } else if (res < 0) {
          s.fail("read", beast::error_code(-res, boost::system::system_category()));
        }
      }
      io_uring_cq_advance(&ring_, seen);
      if (recycled > 0) io_uring_buf_ring_advance(buffers_, recycled);
      rounds.fetch_add(1, std::memory_order_release);
    }
  }

 private:
  [[noreturn]] static void die(const char* what, int err) {
    std::fprintf(stderr, "bench_ws: %s: %s\n", what, std::strerror(-err));
    std::exit(1);
  }
  void give_back(unsigned id, int offset) {
    io_uring_buf_ring_add(buffers_, data_.data() + std::size_t{id} * kBufferSize, kBufferSize,
                          static_cast<unsigned short>(id), io_uring_buf_ring_mask(kBuffers), offset);
  }
  void arm(std::size_t index) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_recv_multishot(sqe, subs_[index]->fd(), nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kGroup;
    io_uring_sqe_set_data64(sqe, index);
  }

  std::vector<std::shared_ptr<Subscriber>>& subs_;
  io_uring ring_{};
  void* ring_mem_ = nullptr;
  io_uring_buf_ring* buffers_ = nullptr;
  std::vector<char> data_;
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
    else if (a == "--wait-arrivals" && i + 1 < argc) opt.wait_arrivals = static_cast<unsigned>(std::stoi(argv[++i]));
    else if (a == "--wait-us" && i + 1 < argc) opt.wait_us = std::stol(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_ws [--subscribers N] [--changes-per-s R] [--seconds S] [--json] [--wait-arrivals K --wait-us T]\n");
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
  ioc.run();  // until every subscriber is upgraded and subscribed (or failed)
  std::atomic<bool> stop_client{false};
  std::atomic<std::uint64_t> rounds{0};
  std::thread client([&] {
    Receiver receiver(subs);  // on its thread: the ring has a single issuer
    receiver.run(stop_client, rounds, opt.wait_arrivals, opt.wait_us);
  });
  auto wait_start = Clock::now();
  while (Clock::now() - wait_start < std::chrono::seconds(60)) {
    if (tally.snapshots + tally.ended >= static_cast<std::uint64_t>(opt.subscribers)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  log(std::to_string(opt.subscribers) + " subscribers on " + channel);

  // The driver: asks placed and cancelled at distinct prices, paced to changes_per_s.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> changes{0}, errors{0};
  std::vector<std::thread> drivers;
  const int driver_threads = 4;
  // Each driver call's round trip while measuring (ms), per driver thread: what paces the committed
  // changes once it exceeds the period (each connection waits for its answer before the next call).
  std::vector<std::vector<double>> round_trips(driver_threads);
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
        const auto sent = Clock::now();
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
        if (tally.measuring) round_trips[d].push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
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
  tally.measuring = true;
  auto t0 = Clock::now();
  auto changes0 = changes.load();
  const double server_cpu0 = cpu_seconds(server.pid()), client_cpu0 = cpu_seconds(0);
  const std::uint64_t server_cs0 = context_switches(server.pid()), client_cs0 = context_switches(0);
  std::this_thread::sleep_for(std::chrono::seconds(opt.seconds));
  tally.measuring = false;
  // The client's batch under way may still count; it has ended once the next one began.
  for (auto r0 = rounds.load(std::memory_order_acquire); rounds.load(std::memory_order_acquire) < r0 + 2;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  auto changes1 = changes.load();
  const double server_cpu = cpu_seconds(server.pid()) - server_cpu0, client_cpu = cpu_seconds(0) - client_cpu0;
  const double server_cs = static_cast<double>(context_switches(server.pid()) - server_cs0),
               client_cs = static_cast<double>(context_switches(0) - client_cs0);
  std::string after = snapshot_metrics();
  stop = true;
  for (auto& t : drivers) t.join();
  stop_client = true;
  client.join();
  server.stop();

  std::vector<double> round_trip_ms;
  for (const auto& v : round_trips) round_trip_ms.insert(round_trip_ms.end(), v.begin(), v.end());
  const double rtt_p50 = percentile(round_trip_ms, 0.50), rtt_p99 = percentile(round_trip_ms, 0.99);
  double per_s = static_cast<double>(tally.messages) / elapsed;
  double changes_per_s = static_cast<double>(changes1 - changes0) / elapsed;
  double p50 = percentile(tally.delays_ms, 0.50), p99 = percentile(tally.delays_ms, 0.99),
         p999 = percentile(tally.delays_ms, 0.999);
  // The stages of each change seen by every subscriber while measuring (a change at the window's edges
  // is seen by some only).
  std::vector<double> first_ms, spread_ms;
  for (const auto& [seq, c] : tally.changes) {
    if (c.received != static_cast<std::uint32_t>(opt.subscribers)) continue;
    first_ms.push_back(static_cast<double>(c.first_us - c.ts_ms * 1000) / 1000.0);
    spread_ms.push_back(static_cast<double>(c.last_us - c.first_us) / 1000.0);
  }
  const double first_p50 = percentile(first_ms, 0.50), first_p99 = percentile(first_ms, 0.99);
  const double spread_p50 = percentile(spread_ms, 0.50), spread_p99 = percentile(spread_ms, 0.99);
  auto slow = metric(after, "gpuex_ws_slow_consumers_total") - metric(before, "gpuex_ws_slow_consumers_total");
  auto deliveries = metric(after, "gpuex_ws_deliveries_total") - metric(before, "gpuex_ws_deliveries_total");
  auto writes = metric(after, "gpuex_ws_writes_total") - metric(before, "gpuex_ws_writes_total");
  auto transactions = metric(after, "gpuex_store_transactions_total") - metric(before, "gpuex_store_transactions_total");
  // CPU per delivered message over the measured window: gpuexd (all its threads), and this process
  // (the subscribers' thread and the driver's four).
  const double delivered = static_cast<double>(tally.messages);
  const double server_us = delivered > 0 ? server_cpu * 1e6 / delivered : 0;
  const double client_us = delivered > 0 ? client_cpu * 1e6 / delivered : 0;
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
                                              {"disconnected", tally.ended.load()},
                                              {"slow_consumers_closed", slow},
                                              {"frames_per_write", std::round(frames_per_write * 100) / 100},
                                              {"server_us_per_message", std::round(server_us * 100) / 100},
                                              {"client_us_per_message", std::round(client_us * 100) / 100},
                                              {"driver_errors", errors.load()},
                                              {"server_switches_per_message", delivered > 0 ? std::round(server_cs / delivered * 1000) / 1000 : 0},
                                              {"client_switches_per_message", delivered > 0 ? std::round(client_cs / delivered * 1000) / 1000 : 0},
                                              {"first_receipt_p50_ms", std::round(first_p50 * 100) / 100},
                                              {"first_receipt_p99_ms", std::round(first_p99 * 100) / 100},
                                              {"spread_p50_ms", std::round(spread_p50 * 100) / 100},
                                              {"spread_p99_ms", std::round(spread_p99 * 100) / 100},
                                              {"driver_round_trip_p50_ms", std::round(rtt_p50 * 100) / 100},
                                              {"driver_round_trip_p99_ms", std::round(rtt_p99 * 100) / 100},
                                              {"transactions_per_s", std::round(static_cast<double>(transactions) / elapsed)}})
              << "\n";
  } else {
    std::printf("%s\n", workload);
    std::printf("  messages delivered/s  %10.0f   (%llu in %.1f s, all subscribers together)\n", per_s,
                static_cast<unsigned long long>(tally.messages), elapsed);
    std::printf("  book changes/s        %10.0f   (committed through the API)\n", changes_per_s);
    std::printf("  delay publish->recv   p50 %.2f ms   p99 %.2f ms   p99.9 %.2f ms\n", p50, p99, p999);
    std::printf("  context switches per delivered message: gpuexd %.3f, this client %.3f\n",
                delivered > 0 ? server_cs / delivered : 0, delivered > 0 ? client_cs / delivered : 0);
    std::printf("  per change: ts->first receipt p50 %.2f ms p99 %.2f ms; first->last receipt p50 %.2f ms p99 %.2f ms\n",
                first_p50, first_p99, spread_p50, spread_p99);
    std::printf("  driver round trip p50 %.2f ms p99 %.2f ms; store transactions/s %.0f\n", rtt_p50, rtt_p99,
                static_cast<double>(transactions) / elapsed);
    std::printf("  frames per socket write %.2f (server: channel messages queued / gather writes)\n",
                frames_per_write);
    std::printf("  CPU per delivered message: gpuexd %.2f us, this client (subscribers + driver) %.2f us\n",
                server_us, client_us);
    std::printf("  seq gaps %llu, connections ended %llu, slow consumers closed %lld, driver errors %llu\n",
                static_cast<unsigned long long>(tally.gaps), static_cast<unsigned long long>(tally.ended.load()),
                static_cast<long long>(slow), static_cast<unsigned long long>(errors.load()));
  }
  return 0;
}
