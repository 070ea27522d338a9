// gpuexd: the gpuex exchange server. Sub-commands: serve, migrate, admin, replay.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "server/app.hpp"
#include "server/replay.hpp"
#include "server/store/connection.hpp"

namespace {

void add_database_options(CLI::App& cmd, gpuex::ServerConfig& config) {
  cmd.add_option("--dsn", config.dsn, "PostgreSQL connection URL (postgresql://user@host:port/db)")
      ->envname("GPUEX_DSN")
      ->required();
  cmd.add_option("--db-wait-s", config.db_wait, "How long start-up waits for PostgreSQL")
      ->envname("GPUEX_DB_WAIT_S")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpuexd: an exchange for GPU time"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("gpuexd ") + GPUEX_VERSION);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or critical")
      ->envname("GPUEX_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();

  gpuex::ServerConfig config;

  auto* serve = app.add_subcommand("serve", "Serve the exchange over HTTP");
  add_database_options(*serve, config);
  serve->add_option("--listen", config.listen, "HOST:PORT to listen on (port 0: any free port)")
      ->envname("GPUEX_LISTEN")
      ->capture_default_str();
  serve->add_option("--port-file", config.port_file, "Write the bound port to this file once listening");
  serve->add_option("--tls-cert", config.tls_cert, "PEM certificate chain: serve HTTPS")
      ->envname("GPUEX_TLS_CERT");
  serve->add_option("--tls-key", config.tls_key, "PEM private key for --tls-cert")->envname("GPUEX_TLS_KEY");
  serve->add_flag("--migrate", config.migrate, "Apply pending migrations instead of refusing to start");
  serve->add_option("--io-threads", config.io_threads,
                    "Threads serving HTTP connections, and as many for upgraded plain (not TLS) WebSocket ones")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  serve->add_option("--query-pool", config.query_pool_size, "PostgreSQL connections for queries outside the engine")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  serve->add_option("--health-interval-ms", config.health_interval, "How often PostgreSQL is probed")
      ->check(CLI::Range(10, 60'000))
      ->capture_default_str();
  serve->add_option("--tick-ms", config.tick_interval, "How often time (expiries, leases) is applied")
      ->check(CLI::Range(10, 60'000))
      ->capture_default_str();
  serve->add_option("--engine-heap-mib", config.engine_heap_mib,
                    "Memory faulted in for the engine's book at start and kept for it, so growth while trading "
                    "does not page-fault (0: none)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 16))
      ->capture_default_str();
  serve->add_option("--snapshot-every", config.snapshot_every,
                    "Commands between engine snapshots (0: none); a restart replays only the commands after the last")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1'000'000'000}))
      ->capture_default_str();
  serve->add_option("--snapshot-retry-ms", config.snapshot_retry,
                    "A snapshot the store did not take is tried again after this (twice at most)")
      ->check(CLI::Range(10, 3'600'000))
      ->capture_default_str();
  serve->add_option("--store-timeout-ms", config.store_timeout,
                    "A commit PostgreSQL does not answer within this fails: writes get 503 and the engine is "
                    "rebuilt from the store once it answers (a frozen or stalled database)")
      ->check(CLI::Range(100, 3'600'000))
      ->capture_default_str();
  serve->add_flag("--test-clock", config.test_clock, "Tests only: POST /v1/admin/clock moves server time forward");
  serve->add_option("--shutdown-grace-s", config.shutdown_grace, "In-flight requests get this long on SIGTERM")
      ->capture_default_str();
  serve->add_option("--read-timeout-s", config.read_timeout, "A request must arrive whole within this")
      ->capture_default_str();
  serve->add_option("--key-rate", config.key_rate_per_s, "Requests per second per API key")->capture_default_str();
  serve->add_option("--key-burst", config.key_burst, "Burst per API key")->capture_default_str();
  serve->add_option("--ip-rate", config.ip_rate_per_s, "Public requests per second per client IP")
      ->capture_default_str();
  serve->add_option("--ip-burst", config.ip_burst, "Public burst per client IP")->capture_default_str();
  serve->add_option("--max-connections", config.max_connections, "Open connections in total")
      ->capture_default_str();
  serve->add_option("--max-connections-per-ip", config.max_connections_per_ip, "Open connections per client IP")
      ->capture_default_str();
  serve->add_option("--ws-heartbeat-ms", config.ws_heartbeat, "WebSocket: heartbeat on a channel idle this long")
      ->check(CLI::Range(10, 600'000))
      ->capture_default_str();
  serve->add_option("--ws-idle-ms", config.ws_idle_timeout, "WebSocket: close a connection silent this long")
      ->check(CLI::Range(50, 3'600'000))
      ->capture_default_str();
  serve->add_option("--ws-queue", config.ws_queue_limit, "WebSocket: messages queued for a slow reader before it is closed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  serve->add_option("--max-pools-per-provider", config.max_pools_per_provider,
                    "Pools (not retired) one provider may have; more is 422 pool_limit")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  serve->add_option("--ws-queue-bytes", config.ws_queue_bytes,
                    "WebSocket: bytes of messages queued for a slow reader before it is closed")
      ->check(CLI::Range(std::size_t{64 * 1024}, std::size_t{1} << 30))
      ->capture_default_str();
  serve->add_option("--ws-queue-total-bytes", config.ws_queue_total_bytes,
                    "WebSocket: bytes queued for all connections together; past it, a connection holding more "
                    "than its share is closed as a slow consumer")
      ->check(CLI::Range(std::size_t{64 * 1024}, std::size_t{1} << 40))
      ->capture_default_str();
  serve->add_option("--ws-send-buffer", config.ws_send_buffer,
                    "WebSocket: kernel send buffer per connection in bytes (0: the OS default, which grows to MBs)")
      ->check(CLI::Range(0, 64 * 1024 * 1024))
      ->capture_default_str();
  serve->add_option("--ws-max-subscriptions", config.ws_max_subscriptions, "WebSocket: channels per connection")
      ->check(CLI::Range(std::size_t{1}, std::size_t{10'000}))
      ->capture_default_str();
  serve->add_option("--ws-message-rate", config.ws_message_rate, "WebSocket: client messages per second")
      ->capture_default_str();
  serve->add_option("--ws-message-burst", config.ws_message_burst, "WebSocket: client message burst")
      ->capture_default_str();
  serve->add_option("--web-root", config.web_root, "Serve the dashboard at / from this folder (the source's web/)")
      ->envname("GPUEX_WEB_ROOT");
  serve->add_option("--web-vendor", config.web_vendor, "node_modules folder with the dashboard's npm packages")
      ->envname("GPUEX_WEB_VENDOR");

  auto* migrate = app.add_subcommand("migrate", "Apply pending database migrations and exit");
  add_database_options(*migrate, config);

  auto* admin = app.add_subcommand("admin", "Administration on the database directly");
  admin->require_subcommand(1);
  auto* create_account = admin->add_subcommand("create-account", "Create an account and print its first API key");
  add_database_options(*create_account, config);
  std::string account_name, account_scopes;
  create_account->add_option("--name", account_name, "Account name")->required();
  create_account->add_option("--scopes", account_scopes, "Comma-separated: read, trade, provide, admin")->required();
  auto* revoke_key = admin->add_subcommand("revoke-key", "Revoke an API key (running servers refuse it at once)");
  add_database_options(*revoke_key, config);
  std::string key_id;
  revoke_key->add_option("--key-id", key_id, "The key's id (k_ and 16 hex digits)")->required();

  auto* replay = app.add_subcommand("replay", "Load generator: real offers as pools and asks, buyers bidding at a rate");
  gpuex::ReplayOptions replay_options;
  replay->add_option("--url", replay_options.url, "gpuexd base URL (plain HTTP)")->capture_default_str();
  replay->add_option("--admin-key", replay_options.admin_key, "API key with the admin scope")
      ->envname("GPUEX_ADMIN_KEY")
      ->required();
  replay->add_option("--offers", replay_options.offers, "Offers CSV (data/vast-offers-*.csv)")
      ->required()
      ->check(CLI::ExistingFile);
  replay->add_option("--rate", replay_options.rate, "Buy orders per second")->capture_default_str();
  replay->add_option("--seconds", replay_options.seconds, "Stop after this long (0: until Ctrl-C)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  replay->add_option("--buyers", replay_options.buyers, "Buyer accounts")->check(CLI::Range(1, 1000))->capture_default_str();
  replay->add_option("--seed", replay_options.seed, "Seed of the offers mapping and the order stream")->capture_default_str();
  replay->add_option("--pools", replay_options.max_pools, "At most this many pools (0: one per machine of the file)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  replay->add_option("--accounts", replay_options.accounts,
                     "Accounts' API keys (JSON): reused if the file exists from an earlier run, else written");
  replay->add_option("--progress-s", replay_options.progress_every_s, "Seconds between progress lines")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);

  // Logs go to stderr; stdout carries only what a command prints for scripts (an API key, say).
  spdlog::set_default_logger(spdlog::stderr_color_mt("gpuexd"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  try {
    if (*serve) return gpuex::serve(config);
    if (*replay) return gpuex::replay(replay_options);
    if (*create_account) return gpuex::admin_create_account(config, account_name, account_scopes);
    if (*revoke_key) return gpuex::admin_revoke_key(config, key_id);
    return gpuex::migrate(config);
  } catch (const gpuex::store::StoreError& e) {
    spdlog::critical("database: {}", e.what());
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
  }
  return 1;
}
