// The HTTP routes of gpuexd, grouped by area; each group adds itself to the router.
#pragma once

#include "server/auth.hpp"
#include "server/gate.hpp"
#include "server/metrics.hpp"
#include "server/router.hpp"
#include "server/store/health_monitor.hpp"
#include "server/store/query_pool.hpp"

namespace gpuex {

// What route handlers may use. Owned by the App; outlives every request.
struct Services {
  store::HealthMonitor& health;
  store::QueryPool& queries;
  Metrics& metrics;
  KeyStore& keys;
  Gate& gate;
};

// /healthz, /readyz, /metrics.
void add_system_routes(http::Router& router, Services& services);
// /v1/markets.
void add_market_routes(http::Router& router, Services& services);
// /v1/accounts, /v1/keys (admin).
void add_account_routes(http::Router& router, Services& services);

}  // namespace gpuex
