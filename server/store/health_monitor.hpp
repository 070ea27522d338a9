// Watches whether PostgreSQL answers, so /readyz and the metrics can tell the truth without a query.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace gpuex::store {

class HealthMonitor {
 public:
  HealthMonitor(std::string dsn, std::chrono::milliseconds interval);
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

  std::string dsn_;
  std::chrono::milliseconds interval_;
  std::atomic<bool> up_{false};
  std::atomic<std::uint64_t> failures_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gpuex::store
