// See rate_limiter.hpp.
#include "server/rate_limiter.hpp"

#include <algorithm>
#include <cmath>

namespace gpuex {

namespace {
// Past this many tracked keys, buckets that have refilled completely are dropped (they carry no state).
constexpr std::size_t kMaxTracked = 100'000;
}  // namespace

RateLimiter::Decision RateLimiter::take(const std::string& key) {
  return take(key, std::chrono::steady_clock::now());
}

RateLimiter::Decision RateLimiter::take(const std::string& key, std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (buckets_.size() >= kMaxTracked) forget_idle(now);
  auto [it, inserted] = buckets_.try_emplace(key, Bucket{burst_, now});
  Bucket& b = it->second;
  double elapsed = std::chrono::duration<double>(now - b.last).count();
  b.tokens = std::min(burst_, b.tokens + std::max(0.0, elapsed) * rate_);
  b.last = now;
  Decision d{false, static_cast<long>(burst_), 0, 0};
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    d.allowed = true;
  } else {
    d.retry_after_s = std::max(1L, static_cast<long>(std::ceil((1.0 - b.tokens) / rate_)));
  }
  d.remaining = static_cast<long>(std::floor(b.tokens));
  return d;
}

void RateLimiter::forget_idle(std::chrono::steady_clock::time_point now) {
  std::erase_if(buckets_, [&](const auto& kv) {
    double elapsed = std::chrono::duration<double>(now - kv.second.last).count();
    return kv.second.tokens + elapsed * rate_ >= burst_;
  });
}

}  // namespace gpuex
