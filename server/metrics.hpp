// Request counters and latency histograms, rendered as Prometheus text at /metrics.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace gpuex {

class Metrics {
 public:
  // `route` is the route's template ("/v1/markets/{m}/book"), never the raw path, so labels stay few.
  void record_request(std::string_view method, std::string_view route, unsigned status,
                      std::chrono::nanoseconds latency);
  void connection_opened() { connections_.fetch_add(1, std::memory_order_relaxed); }
  void connection_closed() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  std::int64_t open_connections() const { return connections_.load(std::memory_order_relaxed); }

  // The counters in Prometheus text exposition format.
  std::string render() const;

 private:
  static constexpr std::array<double, 12> kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,   0.1,   0.25,   0.5,   1.0,  5.0};
  struct Histogram {
    std::array<std::uint64_t, kBuckets.size()> counts{};
    std::uint64_t total = 0;
    double sum_seconds = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, unsigned>, std::uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
  std::atomic<std::int64_t> connections_{0};
};

}  // namespace gpuex
