// Exact money arithmetic in 128-bit integers.
#include "matching/money.hpp"

#include <limits>

namespace gpuex::matching {

namespace {

// num / den rounded half to even, den > 0, in the integer type I (no step overflows it).
template <class I>
I half_even(I num, I den) {
  I q = num / den;
  I r = num % den;
  if (r < 0) {  // make the remainder non-negative (floor division)
    r += den;
    q -= 1;
  }
  const I rest = den - r;  // r compared with den / 2 as r against what is left of den (2r could overflow I)
  if (r > rest || (r == rest && q % 2 != 0)) q += 1;
  return q;
}

}  // namespace

Int128 div_half_even(Int128 num, Int128 den) {
  // Both within 64 bits (every cost a fill bills): the processor's 64-bit division instead of the 128-bit
  // library calls.
  constexpr Int128 kMin = std::numeric_limits<std::int64_t>::min();
  constexpr Int128 kMax = std::numeric_limits<std::int64_t>::max();
  if (den > 0 && den <= kMax && num >= kMin && num <= kMax) {
    return half_even<std::int64_t>(static_cast<std::int64_t>(num), static_cast<std::int64_t>(den));
  }
  return half_even<Int128>(num, den);
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
