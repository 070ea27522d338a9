// Token buckets keyed by API key or client IP: `rate` requests per second, bursts up to `burst`.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace gpuex {

class RateLimiter {
 public:
  RateLimiter(double rate_per_s, double burst) : rate_(rate_per_s), burst_(burst) {}

  struct Decision {
    bool allowed;
    long limit;             // RateLimit-Limit: the burst
    long remaining;         // RateLimit-Remaining: whole tokens left
    long retry_after_s;     // Retry-After when refused
  };
  Decision take(const std::string& key);
  Decision take(const std::string& key, std::chrono::steady_clock::time_point now);
  // The decision take() would make, without taking (for the headers of answers no limit applies to).
  Decision peek(const std::string& key) const;

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point last;
  };
  void forget_idle(std::chrono::steady_clock::time_point now);
  double refilled(const Bucket& b, std::chrono::steady_clock::time_point now) const;  // tokens at `now`
  Decision decide(bool allowed, double tokens) const;

  double rate_;
  double burst_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace gpuex
