// Analytics prices: a quotient is rounded once, for the price and for its normalized value alike.
#include <catch2/catch.hpp>

#include "server/analytics/candle_json.hpp"

using gpuex::analytics::ExactPrice;
using gpuex::analytics::normalized;

TEST_CASE("a VWAP's normalized value is the exact quotient divided by perf_factor, rounded once") {
  // One GPU-hour at 2.0000 and two at 2.0001 (A100-SXM-80G, perf_factor 0.315470): the VWAP is
  // 6.0002 / 3 = 2.00006666… → 2.000067; ÷ 0.315470 exactly = 6.3399584… → 6.339958, whereas the
  // rounded VWAP ÷ 0.315470 = 6.3399594… → 6.339959.
  ExactPrice vwap(gpuex::matching::Int128(6'000'200), 3);
  CHECK(vwap.micros() == 2'000'067);
  CHECK(normalized(vwap, 315'470) == "6.339958");
  CHECK(normalized(ExactPrice(2'000'067), 315'470) == "6.339959");  // a plain price: its own quotient
}
