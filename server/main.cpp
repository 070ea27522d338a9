// gpuexd: the gpuex exchange server. Sub-commands: serve, migrate.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "server/app.hpp"
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
  serve->add_option("--io-threads", config.io_threads, "Threads serving connections")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  serve->add_option("--read-pool", config.read_pool_size, "PostgreSQL connections for reads")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
      ->capture_default_str();
  serve->add_option("--health-interval-ms", config.health_interval, "How often PostgreSQL is probed")
      ->check(CLI::Range(10, 60'000))
      ->capture_default_str();
  serve->add_option("--shutdown-grace-s", config.shutdown_grace, "In-flight requests get this long on SIGTERM")
      ->capture_default_str();
  serve->add_option("--read-timeout-s", config.read_timeout, "A request must arrive whole within this")
      ->capture_default_str();
  serve->add_option("--max-connections", config.max_connections, "Open connections in total")
      ->capture_default_str();
  serve->add_option("--max-connections-per-ip", config.max_connections_per_ip, "Open connections per client IP")
      ->capture_default_str();

  auto* migrate = app.add_subcommand("migrate", "Apply pending database migrations and exit");
  add_database_options(*migrate, config);

  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  try {
    if (*serve) return gpuex::serve(config);
    return gpuex::migrate(config);
  } catch (const gpuex::store::StoreError& e) {
    spdlog::critical("database: {}", e.what());
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
  }
  return 1;
}
