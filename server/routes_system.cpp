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

  // Ready when PostgreSQL answers: a load balancer sends no orders to a server that cannot store them.
  router.add(verb::get, "/readyz", [&services](http::RequestContext&, http::Respond respond) {
    if (services.health.up()) {
      respond(http::json_response(http::Status::ok, {{"status", "ready"}}));
    } else {
      respond(http::error_response(http::Status::service_unavailable, "store_unavailable",
                                   "PostgreSQL does not answer"));
    }
  });

  router.add(verb::get, "/metrics", [&services](http::RequestContext&, http::Respond respond) {
    std::string text = services.metrics.render();
    text += "# HELP gpuex_store_up 1 when PostgreSQL answered the last health probe.\n";
    text += "# TYPE gpuex_store_up gauge\n";
    text += fmt::format("gpuex_store_up {}\n", services.health.up() ? 1 : 0);
    text += "# HELP gpuex_store_probe_failures_total Health probes of PostgreSQL that failed.\n";
    text += "# TYPE gpuex_store_probe_failures_total counter\n";
    text += fmt::format("gpuex_store_probe_failures_total {}\n", services.health.failures());
    auto w = services.writer.counters();
    text += "# HELP gpuex_store_transactions_total Transactions the store writer committed.\n";
    text += "# TYPE gpuex_store_transactions_total counter\n";
    text += fmt::format("gpuex_store_transactions_total {}\n", w.transactions);
    text += "# HELP gpuex_store_commands_total Engine commands committed.\n";
    text += "# TYPE gpuex_store_commands_total counter\n";
    text += fmt::format("gpuex_store_commands_total {}\n", w.commands);
    text += "# HELP gpuex_store_rows_total Rows written with those commands (the commands included).\n";
    text += "# TYPE gpuex_store_rows_total counter\n";
    text += fmt::format("gpuex_store_rows_total {}\n", w.statements);
    text += "# HELP gpuex_store_failed_transactions_total Transactions that did not commit.\n";
    text += "# TYPE gpuex_store_failed_transactions_total counter\n";
    text += fmt::format("gpuex_store_failed_transactions_total {}\n", w.failed_transactions);
    text += "# HELP gpuex_engine_accepting 1 while the engine takes writes.\n";
    text += "# TYPE gpuex_engine_accepting gauge\n";
    text += fmt::format("gpuex_engine_accepting {}\n", services.runner.accepting() ? 1 : 0);
    respond(http::text_response(http::Status::ok, std::move(text), "text/plain; version=0.0.4"));
  });
}

}  // namespace gpuex
