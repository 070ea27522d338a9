// See app.hpp.
#include "server/app.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <iostream>
#include <fstream>
#include <optional>
#include <thread>

#include <sys/resource.h>

#include "server/analytics/rollups.hpp"
#include "server/auth.hpp"
#include "server/book_views.hpp"
#include "server/dead_mans_switches.hpp"
#include "server/engine_runner.hpp"
#include "server/http_server.hpp"
#include "server/http_session.hpp"
#include "server/routes.hpp"
#include "server/store/health_monitor.hpp"
#include "server/store/migrations.hpp"
#include "server/ws_candles.hpp"
#include "server/ws_session.hpp"

namespace gpuex {
namespace {

namespace net = boost::asio;

// Start-up waits for PostgreSQL (it may still be starting beside us), then gives up clearly.
store::PgConnection connect_with_wait(const ServerConfig& config) {
  auto deadline = std::chrono::steady_clock::now() + config.db_wait;
  for (int attempt = 1;; ++attempt) {
    try {
      return store::PgConnection::connect(config.dsn, std::chrono::seconds(5));
    } catch (const store::StoreError& e) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
      if (attempt == 1) spdlog::warn("waiting for PostgreSQL: {}", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
}

std::string names(const std::vector<store::Migration>& migrations) {
  std::string out;
  for (const auto& m : migrations) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

void write_port_file(const std::string& path, unsigned short port) {
  if (path.empty()) return;
  // Written whole and renamed, so a reader never sees half a number.
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << '\n';
  std::filesystem::rename(tmp, path);
}

std::optional<net::ssl::context> make_tls(const ServerConfig& config) {
  if (config.tls_cert.empty() && config.tls_key.empty()) return std::nullopt;
  if (config.tls_cert.empty() || config.tls_key.empty()) {
    throw std::invalid_argument("TLS needs both --tls-cert and --tls-key");
  }
  net::ssl::context ctx(net::ssl::context::tls_server);
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                  net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                  net::ssl::context::no_tlsv1_1);
  ctx.use_certificate_chain_file(config.tls_cert);
  ctx.use_private_key_file(config.tls_key, net::ssl::context::pem);
  return ctx;
}

}  // namespace

int migrate(const ServerConfig& config) {
  auto db = connect_with_wait(config);
  auto applied = store::apply_migrations(db);
  if (applied.empty()) {
    spdlog::info("migrate: {} is up to date ({} migrations)", store::describe_dsn(config.dsn),
                 store::embedded_migrations().size());
  } else {
    spdlog::info("migrate: applied {} to {}", names(applied), store::describe_dsn(config.dsn));
  }
  return 0;
}

int admin_create_account(const ServerConfig& config, const std::string& name, const std::string& scope_list) {
  auto scopes = parse_scopes(scope_list);
  if (!scopes) {
    spdlog::critical("--scopes must be a comma-separated list of read, trade, provide, admin");
    return 2;
  }
  if (name.empty() || name.size() > 100) {
    spdlog::critical("--name must have 1 to 100 characters");
    return 2;
  }
  auto db = connect_with_wait(config);
  if (!store::pending_migrations(db).empty()) {
    spdlog::critical("the database has unapplied migrations; run `gpuexd migrate` first");
    return 2;
  }
  auto [id, key] = create_account(db, name, *scopes);
  boost::json::array scope_names;
  for (auto s : {Scope::read, Scope::trade, Scope::provide, Scope::admin}) {
    if (has_scope(*scopes, s)) scope_names.emplace_back(scopes_to_string(static_cast<Scopes>(s)));
  }
  // The key goes to stdout only (logs go to stderr): `gpuexd admin create-account ... | jq -r .api_key`.
  std::cout << boost::json::serialize(boost::json::object{{"account_id", std::to_string(id)},
                                                          {"name", name},
                                                          {"key_id", key.id},
                                                          {"api_key", key.key},
                                                          {"scopes", scope_names}})
            << std::endl;
  return 0;
}

int admin_revoke_key(const ServerConfig& config, const std::string& key_id) {
  auto db = connect_with_wait(config);
  auto revoked = revoke_key(db, key_id);
  if (!revoked) {
    spdlog::critical("no key {} in {}", key_id, store::describe_dsn(config.dsn));
    return 1;
  }
  spdlog::info("key {} revoked (running servers refuse it from now on)", key_id);
  std::cout << boost::json::serialize(boost::json::object{
                   {"key_id", key_id}, {"account_id", revoked->account_id}, {"revoked_at", revoked->revoked_at}})
            << std::endl;
  return 0;
}

// Each connection is a file: the soft open-files limit (often 1,024) is raised to the hard one, and a
// limit still below --max-connections is said, since connections past it fail to be accepted (EMFILE).
void raise_open_files_limit(const ServerConfig& config) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  // Beside the connections: PostgreSQL connections, the listening socket, logs, libraries.
  const auto needed = static_cast<rlim_t>(config.max_connections) + 64;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    spdlog::warn("the open-files limit is {} but --max-connections is {}: connections past the limit will be "
                 "refused by the kernel (raise `ulimit -n` or lower --max-connections)",
                 limit.rlim_cur, config.max_connections);
  }
}

// One server per database: a second would log commands beside the first, and its start would fire the
// dead man's switches the first one holds (as if left by a crash). The session lock is held by the
// health monitor's connection for the server's life (taken again if PostgreSQL restarts); a server
// killed a moment ago may still hold it while its backend notices, so a start waits a little for it.
std::optional<store::PgConnection> hold_serving_lock(const ServerConfig& config) {
  auto db = connect_with_wait(config);
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (db.exec(store::kTryServingLock).text(0, 0) == std::string("t")) return db;
    if (attempt == 0) spdlog::warn("another gpuexd serves this database; waiting up to 10 s for it to end");
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  spdlog::critical("another gpuexd serves {}: refusing to start beside it", store::describe_dsn(config.dsn));
  return std::nullopt;
}

int serve(const ServerConfig& config) {
  auto tls = make_tls(config);
  (void)parse_listen_address(config.listen);  // fail on a bad address before anything starts
  raise_open_files_limit(config);
  auto serving_lock = hold_serving_lock(config);
  if (!serving_lock) return 2;

  // The database must be there and current before we take traffic.
  matching::EngineConfig engine_config;
  MarketTable markets;
  {
    auto db = connect_with_wait(config);
    auto pending = store::pending_migrations(db);
    if (!pending.empty()) {
      if (!config.migrate) {
        spdlog::critical("the database has {} unapplied migration(s): {}; run `gpuexd migrate` or "
                         "start with --migrate",
                         pending.size(), names(pending));
        return 2;
      }
      spdlog::info("applied migrations: {}", names(store::apply_migrations(db)));
    }
    auto rows = db.exec("SELECT id, tick_size_micros, round(perf_factor * 1000)::int FROM markets ORDER BY id");
    for (int i = 0; i < rows.rows(); ++i) {
      matching::MarketSpec m{matching::MarketId{rows.text(i, 0)}, matching::Price(rows.integer(i, 1)),
                             static_cast<std::int32_t>(rows.integer(i, 2))};
      markets.emplace(rows.text(i, 0), m);
      engine_config.markets.push_back(m);
    }
  }

  net::io_context ioc(static_cast<int>(config.io_threads));
  Metrics metrics;
  store::QueryPool queries(config.dsn, config.query_pool_size);
  KeyStore keys(queries);
  // Lost only if another gpuexd started while this one's lock connection was gone (PostgreSQL restarted):
  // two servers must never write one database, so this one ends at once, as a crash would (everything
  // it acknowledged is committed; the other server recovered it).
  store::ServingLock lock{std::move(*serving_lock), [] {
    spdlog::critical("another gpuexd took this database's serving lock while PostgreSQL was away: stopping at once");
    spdlog::default_logger()->flush();
    std::_Exit(3);
  }};
  // Keys revoked elsewhere (another tool, SQL) stop working here too.
  store::Listener revocations{kKeyRevokedChannel, [&keys](const std::string& key_id) { keys.revoke(key_id); },
                              [&keys](store::PgConnection& db) { keys.recheck(db); }};
  store::HealthMonitor health(config.dsn, config.health_interval, std::move(lock), std::move(revocations));
  RateLimiter per_key(config.key_rate_per_s, config.key_burst);
  RateLimiter per_ip(config.ip_rate_per_s, config.ip_burst);
  RateLimiter key_lookups(config.ip_rate_per_s, config.ip_burst);  // store lookups of keys not cached, per IP
  Gate gate(keys, per_key, per_ip, key_lookups);

  // The engine thread and the store writer (DESIGN.md §2); the published books and the WebSocket
  // channels follow commits (the hub applies committed deltas to the views and publishes them).
  BookViews views;
  analytics::Rollups rollups;  // in every batch's transaction (DESIGN.md §5)
  EngineRunner* runner_ptr = nullptr;
  store::Writer writer(config.dsn, [&runner_ptr](const std::string&) {
    if (runner_ptr) runner_ptr->store_failed();
  });
  writer.set_answer_timeout(config.store_timeout);
  writer.add_transaction_part(rollups);
  ws::Hub hub(views, [&runner_ptr] { return runner_ptr ? runner_ptr->server_time_ms() : 0; });
  writer.set_completion_scope([&hub](const std::function<void()>& complete) {
    ws::Hub::DeferredWakes wakes(hub);  // ended last: the fan-out's writes start behind the HTTP answers
    http::DeferredAnswers answers;
    complete();
  });
  writer.add_listener([&hub](const store::Batch& batch) { hub.publish(batch); });
  ws::CandlePublisher candles(config.dsn, hub);  // the candles channels, read back after commit
  hub.set_candle_feed([&candles](ws::CandleRequest r) { candles.request(std::move(r)); });
  const alloc::EngineHeap engine_heap(config.engine_heap_mib << 20);
  spdlog::info("engine heap: {}", engine_heap.describe());
  EngineRunner runner(engine_config, writer,
                      {config.dsn, config.tick_interval, 2048, [&hub](const matching::Engine& e) { hub.reset(e); },
                       config.snapshot_every, config.snapshot_retry, &engine_heap});
  runner_ptr = &runner;
  if (config.test_clock) spdlog::warn("test clock on: POST /v1/admin/clock can move server time (never in production)");
  DeadMansSwitches switches(queries, runner);
  {
    auto db = connect_with_wait(config);
    auto r = runner.recover(db);
    spdlog::info("recovered the engine from PostgreSQL in {} ms: {}, {} commands replayed, {} pools, {} open orders, "
                 "{} leases; at seq {}, state digest {:016x}",
                 r.took.count(), r.snapshot_seq ? fmt::format("snapshot of seq {}", r.snapshot_seq) : "no snapshot",
                 r.commands, r.pools, r.open_orders, r.leases, r.last_seq, r.digest);
    writer.start();
    runner.start();
    // Switches armed when the last run ended belong to connections that are gone: their cancels go first.
    if (auto n = switches.recover(db, config.db_wait)) {
      spdlog::info("dead man's switch: cancelled the open orders of {} account(s) armed when the last run ended", n);
    }
  }
  Services services{health,   queries, metrics, keys,    gate,
                    runner,   writer,  views,   hub,     markets,
                    config.test_clock, config.max_pools_per_provider};

  http::Router router;
  add_system_routes(router, services);
  add_market_routes(router, services);
  add_account_routes(router, services);
  add_pool_routes(router, services);
  add_order_routes(router, services);
  add_lease_routes(router, services);
  add_admin_routes(router, services);
  add_quote_routes(router, services);
  add_analytics_routes(router, services);
  add_web_routes(router, services, config.web_root, config.web_vendor);

  HttpServer server(ioc, config, router, metrics, tls ? &*tls : nullptr);
  ws::Context websocket{hub, keys, switches, per_ip, key_lookups, services.markets, config};
  // Upgraded plain-TCP WebSocket connections run on threads of their own (as many as the HTTP ones):
  // HTTP requests and answers no longer wait behind the fan-out handlers of every change before them.
  // (Declared after what the connections use, so that handlers still queued here end first.)
  net::io_context ws_io(static_cast<int>(config.io_threads));
  auto ws_work = net::make_work_guard(ws_io);
  websocket.io = &ws_io;
  server.set_websocket(&websocket);
  server.set_ip_limiter(&per_ip);
  auto bound = server.start();
  write_port_file(config.port_file, bound.port());
  spdlog::info("gpuexd {} listening on {}://{}:{}, database {}, {} markets", GPUEX_VERSION,
               tls ? "https" : "http", bound.address().to_string(), bound.port(),
               store::describe_dsn(config.dsn), markets.size());

  // Graceful stop: no new connections, in-flight requests finish, then everything closes.
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  net::steady_timer grace(ioc);
  net::steady_timer poll(ioc);
  net::steady_timer partitions(ioc);
  // Stops early once every connection has closed and the dead man's switches they fired have committed.
  std::function<void()> stop_when_idle = [&] {
    if (server.sessions() == 0 && switches.pending() == 0) return ioc.stop();
    poll.expires_after(std::chrono::milliseconds(20));
    poll.async_wait([&](boost::system::error_code e) {
      if (!e) stop_when_idle();
    });
  };
  signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    spdlog::info("received signal {}: stopping (in-flight requests get {} s)", sig,
                 config.shutdown_grace.count());
    server.shutdown();
    grace.expires_after(config.shutdown_grace);
    grace.async_wait([&](boost::system::error_code) {
      if (server.sessions() > 0) spdlog::warn("closing {} connections still open", server.sessions());
      if (switches.pending() > 0) {
        spdlog::warn("{} dead man's switch cancels not committed yet: the next start does them", switches.pending());
      }
      ioc.stop();
    });
    partitions.cancel();
    stop_when_idle();
  });

  // Monthly trade partitions three months ahead of server time, made at start and every 6 hours.
  std::function<void()> make_partitions = [&] {
    std::int64_t now = runner.server_time();
    queries.submit(
        [now](store::PgConnection& db) {
          if (int made = analytics::ensure_trade_partitions(db, now, now + 100 * 86400)) {
            spdlog::info("created {} monthly trade partition(s)", made);
          }
        },
        [](const std::string& why) { spdlog::warn("trade partitions not made now (next try in 6 h): {}", why); });
    partitions.expires_after(std::chrono::hours(6));
    partitions.async_wait([&](boost::system::error_code e) {
      if (!e) make_partitions();
    });
  };
  make_partitions();

  std::vector<std::thread> threads;
  for (unsigned i = 0; i < config.io_threads; ++i) threads.emplace_back([&ws_io] { ws_io.run(); });
  for (unsigned i = 1; i < config.io_threads; ++i) threads.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  ws_io.stop();  // its connections closed before ioc stopped (stop_when_idle), or are cut at the grace's end
  for (auto& t : threads) t.join();

  switches.stop();
  runner.stop();  // logs a last tick and waits for its commit
  writer.stop();
  candles.stop();
  queries.stop();
  health.stop();
  spdlog::info("gpuexd stopped");
  return 0;
}

}  // namespace gpuex
