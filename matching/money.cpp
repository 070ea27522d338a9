// Exact money arithmetic in 128-bit integers.
#include "matching/money.hpp"

namespace gpuex::matching {

Int128 div_half_even(Int128 num, Int128 den) {
  Int128 q = num / den;
  Int128 r = num % den;
  if (r < 0) {  // make the remainder non-negative (floor division)
    r += den;
    q -= 1;
  }
  const Int128 twice = r * 2;
  if (twice > den || (twice == den && (q % 2 != 0))) q += 1;
  return q;
}

Int128 cost_x3600(Price price, Qty gpus, Seconds seconds) {
  return static_cast<Int128>(price.value) * gpus.value * seconds.value;
}

Micros cost(Price price, Qty gpus, Seconds seconds) {
  return static_cast<Micros>(div_half_even(cost_x3600(price, gpus, seconds), 3600));
}

Price discounted(Price list, std::int32_t discount_bps, Price tick) {
  const Int128 raw = static_cast<Int128>(list.value) * (10000 - discount_bps) / 10000;
  const Int128 t = tick.value > 0 ? tick.value : 1;
  return Price(static_cast<std::int64_t>(raw / t * t));
}

}  // namespace gpuex::matching
