// Token buckets: a burst is allowed, then the rate; the headers' numbers follow the bucket.
#include <catch2/catch.hpp>

#include "server/rate_limiter.hpp"

using gpuex::RateLimiter;
using namespace std::chrono_literals;

TEST_CASE("a key gets its burst, then its rate, and others are unaffected") {
  RateLimiter limiter(10, 20);  // 10/s, burst 20
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  for (int i = 0; i < 20; ++i) {
    auto d = limiter.take("a", t0);
    REQUIRE(d.allowed);
    CHECK(d.limit == 20);
    CHECK(d.remaining == 19 - i);
  }
  auto refused = limiter.take("a", t0);
  CHECK_FALSE(refused.allowed);
  CHECK(refused.remaining == 0);
  CHECK(refused.retry_after_s == 1);

  CHECK(limiter.take("b", t0).allowed);  // another key has its own bucket

  // 10/s: after 0.5 s five more requests pass, the sixth does not.
  auto t1 = t0 + 500ms;
  for (int i = 0; i < 5; ++i) CHECK(limiter.take("a", t1).allowed);
  CHECK_FALSE(limiter.take("a", t1).allowed);

  // A long pause refills to the burst, never beyond.
  auto t2 = t1 + 1h;
  auto d = limiter.take("a", t2);
  CHECK(d.allowed);
  CHECK(d.remaining == 19);
}
