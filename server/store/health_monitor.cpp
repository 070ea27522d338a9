// See health_monitor.hpp.
#include "server/store/health_monitor.hpp"

#include <spdlog/spdlog.h>

#include <optional>

#include "server/store/connection.hpp"

namespace gpuex::store {

HealthMonitor::HealthMonitor(std::string dsn, std::chrono::milliseconds interval, std::optional<ServingLock> lock,
                             std::optional<Listener> listener)
    : dsn_(std::move(dsn)),
      interval_(interval),
      lock_(std::move(lock)),
      listener_(std::move(listener)),
      thread_([this] { run(); }) {}

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
  bool listening = false;  // LISTEN done on this connection
  auto timeout = std::chrono::duration_cast<std::chrono::seconds>(interval_) + std::chrono::seconds(1);
  for (;;) {
    bool ok = false;
    try {
      if (!conn || !conn->healthy()) {
        listening = false;
        conn = PgConnection::connect(dsn_, timeout, "gpuexd health");
        if (lock_ && conn->exec(kTryServingLock).text(0, 0) != std::string("t")) {
          conn.reset();
          lock_->lost();
          lock_.reset();  // called once; the probes go on without the lock
        }
      }
      if (conn) {
        conn->exec("SELECT 1");
        if (listener_ && !listening) {
          conn->exec(("LISTEN " + listener_->channel).c_str());
          listening = true;
          listener_->resync(*conn);
        }
        ok = true;
      }
    } catch (const StoreError& e) {
      conn.reset();
      if (up_.load()) spdlog::error("store: PostgreSQL stopped answering: {}", e.what());
      failures_.fetch_add(1, std::memory_order_relaxed);
    }
    if (ok && !up_.load()) spdlog::info("store: PostgreSQL answers");
    up_.store(ok);

    // Until the next probe, notifications are read every 100 ms.
    auto next_probe = std::chrono::steady_clock::now() + interval_;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_probe - std::chrono::steady_clock::now());
      {
        std::unique_lock lock(mutex_);
        auto slice = listening ? std::min(left, std::chrono::milliseconds(100)) : left;
        if (wake_.wait_for(lock, std::max(slice, std::chrono::milliseconds(0)), [this] { return stopping_; })) return;
      }
      if (conn && listening) read_notifications(*conn);
      if (std::chrono::steady_clock::now() >= next_probe) break;
    }
  }
}

void HealthMonitor::read_notifications(PgConnection& conn) {
  if (PQconsumeInput(conn.raw()) == 0) return;  // a lost connection: the next probe finds out
  while (PGnotify* n = PQnotifies(conn.raw())) {
    std::string payload = n->extra;
    PQfreemem(n);
    listener_->heard(payload);
  }
}

}  // namespace gpuex::store
