// Watches whether PostgreSQL answers, so /readyz and the metrics can tell the truth without a query,
// and keeps this server's serving lock (one gpuexd per database).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/store/connection.hpp"

namespace gpuex::store {

// The session lock that makes one gpuexd per database (migrations use 7474016).
inline constexpr const char* kTryServingLock = "SELECT pg_try_advisory_lock(7474017)";

// A serving lock already taken on `held`. It lives as long as that connection's backend: when PostgreSQL
// restarts (or the backend is ended) the lock is gone with it, so the probe that reconnects takes it
// again. If another server took it meanwhile, `lost` is called (once, from the monitor's thread).
struct ServingLock {
  PgConnection held;
  std::function<void()> lost;
};

// Notifications of one channel (LISTEN on the monitor's connection, read every 100 ms): `heard` gets
// each payload. Those sent while no connection listened are lost, so `resync` runs on the connection
// each time it starts listening, to read what they would have told.
struct Listener {
  std::string channel;  // an SQL identifier
  std::function<void(const std::string& payload)> heard;
  std::function<void(PgConnection&)> resync;
};

class HealthMonitor {
 public:
  // With a serving lock, the probes run on its connection.
  HealthMonitor(std::string dsn, std::chrono::milliseconds interval, std::optional<ServingLock> lock = std::nullopt,
                std::optional<Listener> listener = std::nullopt);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  // True when the last probe (SELECT 1 on a dedicated connection) succeeded.
  bool up() const { return up_.load(std::memory_order_relaxed); }
  // Probes so far that failed, for the metrics.
  std::uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

  void stop();

 private:
  void run();
  void read_notifications(PgConnection& conn);

  std::string dsn_;
  std::chrono::milliseconds interval_;
  std::optional<ServingLock> lock_;
  std::optional<Listener> listener_;
  std::atomic<bool> up_{false};
  std::atomic<std::uint64_t> failures_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gpuex::store
