// Per-account exposure limits set by an admin.
#pragma once

#include <cstdint>

#include "matching/types.hpp"

namespace gpuex::matching {

struct Limits {
  Qty max_open_gpus{10'000};                  // GPUs of open bids
  Micros max_open_notional{10'000'000'000'000};  // USD 10,000,000: open bids + what leases still owe
  std::int64_t max_open_orders{10'000};       // both sides
  bool operator==(const Limits&) const = default;
};

}  // namespace gpuex::matching
