// Liveness, readiness and metrics: what an operator or a load balancer asks.
#include <spdlog/fmt/fmt.h>

#include "server/routes.hpp"

namespace gpuex {

using http::bhttp::verb;

void add_system_routes(http::Router& router, Services& services) {
  // Alive as long as the process answers, whatever the database does.
  router.add(verb::get, "/healthz", [](http::RequestContext&, http::Respond respond) {
    respond(http::json_response(http::Status::ok, {{"status", "ok"}}));
  });

  // Ready when PostgreSQL answers and the engine takes writes (not waiting to be rebuilt after a failed
  // commit): a load balancer sends no orders to a server that cannot store them.
  router.add(verb::get, "/readyz", [&services](http::RequestContext&, http::Respond respond) {
    if (!services.health.up()) {
      respond(http::error_response(http::Status::service_unavailable, "store_unavailable",
                                   "PostgreSQL does not answer"));
    } else if (!services.runner.accepting()) {
      respond(http::error_response(http::Status::service_unavailable, "store_unavailable",
                                   "the engine is being rebuilt from PostgreSQL after a failed commit"));
    } else {
      respond(http::json_response(http::Status::ok, {{"status", "ready"}}));
    }
  });

  router.add(verb::get, "/metrics", [&services](http::RequestContext&, http::Respond respond) {
    std::string text = services.metrics.render();
    auto add = [&text](std::string_view name, std::string_view type, std::string_view help, auto value) {
      text += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    auto w = services.writer.counters();
    add("gpuex_store_up", "gauge", "1 when PostgreSQL answered the last health probe.", services.health.up() ? 1 : 0);
    add("gpuex_store_probe_failures_total", "counter", "Health probes of PostgreSQL that failed.", services.health.failures());
    add("gpuex_store_transactions_total", "counter", "Transactions the store writer committed.", w.transactions);
    add("gpuex_store_commands_total", "counter", "Engine commands committed.", w.commands);
    add("gpuex_store_rows_total", "counter", "Rows written with those commands (the commands included).", w.statements);
    add("gpuex_store_failed_transactions_total", "counter", "Transactions that did not commit.", w.failed_transactions);
    auto ws = services.hub.stats();
    add("gpuex_ws_subscriptions", "gauge", "WebSocket channel subscriptions open.", ws.subscriptions);
    add("gpuex_ws_channels", "gauge", "WebSocket channels that have listeners.", ws.channels);
    add("gpuex_ws_messages_total", "counter", "WebSocket channel messages built (each serialized once).", ws.messages);
    add("gpuex_ws_deliveries_total", "counter", "WebSocket messages queued to subscribers.", ws.deliveries);
    add("gpuex_ws_writes_total", "counter", "WebSocket socket writes of queued frames (one write carries all that queued).",
        ws.writes);
    add("gpuex_ws_queued_bytes", "gauge", "Bytes in the WebSocket outbound queues (queued or being written).",
        ws.queued_bytes);
    add("gpuex_ws_slow_consumers_total", "counter", "WebSocket connections closed for not reading fast enough.",
        ws.slow_consumers);
    add("gpuex_engine_accepting", "gauge", "1 while the engine takes writes.", services.runner.accepting() ? 1 : 0);
    respond(http::text_response(http::Status::ok, std::move(text), "text/plain; version=0.0.4"));
  });
}

}  // namespace gpuex
