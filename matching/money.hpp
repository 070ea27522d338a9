// Money arithmetic: the cost of GPU time and the green-discounted effective price, exact in integers.
#pragma once

#include <cstdint>

#include "matching/types.hpp"

namespace gpuex::matching {

// price (micro-dollars per GPU-hour) x GPUs x seconds / 3600, rounded half to even, once.
Micros cost(Price price, Qty gpus, Seconds seconds);

// Unrounded cost x 3600 (price x GPUs x seconds): exact, for sums such as open notional.
Int128 cost_x3600(Price price, Qty gpus, Seconds seconds);

// list price x (1 - bps / 10000), rounded down to a multiple of `tick`.
Price discounted(Price list, std::int32_t discount_bps, Price tick);

// Divides rounding half to even; `den` > 0.
Int128 div_half_even(Int128 num, Int128 den);

}  // namespace gpuex::matching
