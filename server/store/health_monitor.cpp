// See health_monitor.hpp.
#include "server/store/health_monitor.hpp"

#include <spdlog/spdlog.h>

#include <optional>

#include "server/store/connection.hpp"

namespace gpuex::store {

HealthMonitor::HealthMonitor(std::string dsn, std::chrono::milliseconds interval, std::optional<ServingLock> lock)
    : dsn_(std::move(dsn)), interval_(interval), lock_(std::move(lock)), thread_([this] { run(); }) {}

HealthMonitor::~HealthMonitor() { stop(); }

void HealthMonitor::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::run() {
  std::optional<PgConnection> conn;
  if (lock_) conn = std::move(lock_->held);
  auto timeout = std::chrono::duration_cast<std::chrono::seconds>(interval_) + std::chrono::seconds(1);
  for (;;) {
    bool ok = false;
    try {
      if (!conn || !conn->healthy()) {
        conn = PgConnection::connect(dsn_, timeout, "gpuexd health");
        if (lock_ && conn->exec(kTryServingLock).text(0, 0) != std::string("t")) {
          conn.reset();
          lock_->lost();
          lock_.reset();  // called once; the probes go on without the lock
        }
      }
      if (conn) conn->exec("SELECT 1");
      ok = conn.has_value();
    } catch (const StoreError& e) {
      conn.reset();
      if (up_.load()) spdlog::error("store: PostgreSQL stopped answering: {}", e.what());
      failures_.fetch_add(1, std::memory_order_relaxed);
    }
    if (ok && !up_.load()) spdlog::info("store: PostgreSQL answers");
    up_.store(ok);

    std::unique_lock lock(mutex_);
    if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) return;
  }
}

}  // namespace gpuex::store
