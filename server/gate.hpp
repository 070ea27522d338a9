// What every route passes before its handler: rate limits (per IP for public data, per key for
// accounts), authentication and scopes. Adds RateLimit-* headers to the answer.
#pragma once

#include "server/auth.hpp"
#include "server/rate_limiter.hpp"
#include "server/router.hpp"

namespace gpuex {

class Gate {
 public:
  // `key_lookups` limits, per IP, the store lookups of keys the server has not cached (made-up keys
  // among them), apart from the IP's requests.
  Gate(KeyStore& keys, RateLimiter& per_key, RateLimiter& per_ip, RateLimiter& key_lookups)
      : keys_(keys), per_key_(per_key), per_ip_(per_ip), key_lookups_(key_lookups) {}

  // Public market data: no key, limited per client IP.
  http::Handler open(http::Handler handler);
  // Needs a valid key holding at least one of `any_of`; limited per key.
  http::Handler scoped(Scopes any_of, http::Handler handler);

 private:
  KeyStore& keys_;
  RateLimiter& per_key_;
  RateLimiter& per_ip_;
  RateLimiter& key_lookups_;
};

// 429 rate_limited with Retry-After, for a refused decision.
http::Response rate_limited_response(const RateLimiter::Decision& refused);

// The bearer token of an Authorization header, if it has one.
std::optional<std::string_view> bearer_token(const http::Request& request);

}  // namespace gpuex
