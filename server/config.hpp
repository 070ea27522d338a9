// gpuexd's settings: every limit and interval is here, so tests and benches can turn them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "alloc/engine_heap.hpp"

namespace gpuex {

struct ServerConfig {
  std::string dsn;                          // PostgreSQL URL or key=value string
  std::string listen = "127.0.0.1:8080";    // host:port; port 0 picks a free one
  std::string port_file;                    // where to write the bound port (tests use port 0)
  std::string tls_cert;                     // PEM certificate chain; with tls_key turns on HTTPS
  std::string tls_key;
  bool migrate = false;                     // apply pending migrations at start instead of refusing
  unsigned io_threads = 2;
  std::size_t query_pool_size = 4;          // connections for reads and admin writes

  // Rate limits (API.md): per API key, and per client IP for public data.
  double key_rate_per_s = 100;
  double key_burst = 200;
  double ip_rate_per_s = 50;
  double ip_burst = 100;
  std::chrono::milliseconds health_interval{1000};
  std::chrono::seconds db_wait{30};         // how long start-up waits for PostgreSQL
  std::chrono::seconds shutdown_grace{10};  // in-flight requests get this long after SIGTERM
  std::chrono::milliseconds tick_interval{1000};  // how often time is applied to the books
  bool test_clock = false;                  // POST /v1/admin/clock may move server time forward
  std::int64_t snapshot_every = 1'000'000;   // commands between engine snapshots (0: none)
  std::chrono::milliseconds snapshot_retry{10'000};  // a snapshot the store refused is tried again after this
  std::chrono::milliseconds store_timeout{30'000};   // a commit PostgreSQL does not answer within this fails
  std::size_t engine_heap_mib = alloc::kDefaultEngineHeapMiB;  // faulted in for the engine at start (engine_heap.hpp)

  // HTTP limits.
  std::size_t body_limit = 64 * 1024;
  std::size_t header_limit = 16 * 1024;
  std::chrono::seconds idle_timeout{60};    // keep-alive connection with nothing to read
  std::chrono::seconds read_timeout{15};    // a request must arrive whole within this
  std::size_t max_pools_per_provider = 1'000;  // pools not retired
  std::size_t max_connections = 10'000;
  std::size_t max_connections_per_ip = 1'000;

  // WebSocket /v1/ws (API.md); connections count against the limits above.
  std::chrono::milliseconds ws_heartbeat{5'000};     // heartbeat on a channel idle this long
  std::chrono::milliseconds ws_idle_timeout{60'000}; // close a connection that sent nothing this long
  std::size_t ws_queue_limit = 4'096;                // messages waiting for a slow reader, then close
  std::size_t ws_queue_bytes = 16 * 1024 * 1024;      // ...or bytes of them (book snapshots are large)
  std::size_t ws_queue_total_bytes = std::size_t{1} << 30;  // all queues together: past it, the fullest close
  int ws_send_buffer = 64 * 1024;                    // the socket's kernel send buffer (0: the OS's)
  std::size_t ws_max_subscriptions = 100;            // channels per connection
  std::size_t ws_message_limit = 16 * 1024;          // bytes in one client message (close 1009 above)
  unsigned ws_bad_message_limit = 10;                // bad client messages before the server closes
  double ws_message_rate = 20;                       // client messages per second (burst below)
  double ws_message_burst = 50;

  // The web dashboard at / (web/ of the source tree) and its npm packages (node_modules).
  std::string web_root;                              // empty: no dashboard
  std::string web_vendor;                            // node_modules with lightweight-charts
};

}  // namespace gpuex
