// See metrics.hpp.
#include "server/metrics.hpp"

#include <spdlog/fmt/fmt.h>

namespace gpuex {
namespace {
template <class... Args>
void append(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}
}  // namespace

void Metrics::record_request(std::string_view method, std::string_view route, unsigned status,
                             std::chrono::nanoseconds latency) {
  double seconds = std::chrono::duration<double>(latency).count();
  std::lock_guard lock(mutex_);
  ++requests_[{std::string(route), std::string(method), status}];
  auto& h = latency_[std::string(route)];
  for (std::size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++h.counts[i];
  }
  ++h.total;
  h.sum_seconds += seconds;
}

std::string Metrics::render() const {
  std::string out;
  std::lock_guard lock(mutex_);
  append(out, "# HELP gpuex_http_requests_total HTTP requests answered, by route template, method and status.\n");
  append(out, "# TYPE gpuex_http_requests_total counter\n");
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    append(out, "gpuex_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{}\"}} {}\n", route, method,
        status, count);
  }
  append(out, "# HELP gpuex_http_request_duration_seconds Time from a request read to its response queued.\n");
  append(out, "# TYPE gpuex_http_request_duration_seconds histogram\n");
  for (const auto& [route, h] : latency_) {
    for (std::size_t i = 0; i < kBuckets.size(); ++i) {
      append(out, "gpuex_http_request_duration_seconds_bucket{{route=\"{}\",le=\"{}\"}} {}\n", route,
          kBuckets[i], h.counts[i]);
    }
    append(out, "gpuex_http_request_duration_seconds_bucket{{route=\"{}\",le=\"+Inf\"}} {}\n", route, h.total);
    append(out, "gpuex_http_request_duration_seconds_sum{{route=\"{}\"}} {}\n", route, h.sum_seconds);
    append(out, "gpuex_http_request_duration_seconds_count{{route=\"{}\"}} {}\n", route, h.total);
  }
  append(out, "# HELP gpuex_http_connections_open HTTP connections open now.\n");
  append(out, "# TYPE gpuex_http_connections_open gauge\n");
  append(out, "gpuex_http_connections_open {}\n", connections_.load(std::memory_order_relaxed));
  return out;
}

}  // namespace gpuex
