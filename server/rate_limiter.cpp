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
  b.tokens = refilled(b, now);
  b.last = now;
  const bool allowed = b.tokens >= 1.0;
  if (allowed) b.tokens -= 1.0;
  return decide(allowed, b.tokens);
}

RateLimiter::Decision RateLimiter::peek(const std::string& key) const {
  std::lock_guard lock(mutex_);
  auto it = buckets_.find(key);
  const double tokens = it == buckets_.end() ? burst_ : refilled(it->second, std::chrono::steady_clock::now());
  return decide(tokens >= 1.0, tokens);
}

double RateLimiter::refilled(const Bucket& b, std::chrono::steady_clock::time_point now) const {
  const double elapsed = std::chrono::duration<double>(now - b.last).count();
  return std::min(burst_, b.tokens + std::max(0.0, elapsed) * rate_);
}

RateLimiter::Decision RateLimiter::decide(bool allowed, double tokens) const {
  Decision d{allowed, static_cast<long>(burst_), static_cast<long>(std::floor(tokens)), 0};
  if (!allowed) d.retry_after_s = std::max(1L, static_cast<long>(std::ceil((1.0 - tokens) / rate_)));
  return d;
}

void RateLimiter::forget_idle(std::chrono::steady_clock::time_point now) {
  std::erase_if(buckets_, [&](const auto& kv) { return refilled(kv.second, now) >= burst_; });
}

}  // namespace gpuex
