// A step function of time with integer values (GPUs): an ask's free capacity, a pool's commitments.
#pragma once

#include <cstdint>
#include <vector>

#include "matching/types.hpp"

namespace gpuex::matching {

// One piece [from, to) at a constant value.
struct Step {
  Seconds from;
  Seconds to;
  std::int64_t gpus{0};
  bool operator==(const Step&) const = default;
};

// Sorted, non-overlapping pieces with non-zero values; time outside every piece has value 0.
// Adjacent pieces with equal values are merged, so equal functions have equal representations.
class Steps {
 public:
  Steps() = default;
  Steps(Seconds from, Seconds to, std::int64_t gpus) { add(from, to, gpus); }

  // Adds `delta` over [from, to).
  void add(Seconds from, Seconds to, std::int64_t delta);
  // Smallest / largest value over [from, to) (gaps count as 0); 0 for an empty interval.
  std::int64_t min(Seconds from, Seconds to) const;
  std::int64_t max(Seconds from, Seconds to) const;
  // Value at one instant.
  std::int64_t at(Seconds t) const;
  // Integral over [from, to) in GPU-seconds.
  std::int64_t integral(Seconds from, Seconds to) const;
  // Drops everything before `t` (history a pool no longer needs).
  void trim_before(Seconds t);
  // Sets the value to 0 from `t` on.
  void clear_from(Seconds t);

  const std::vector<Step>& pieces() const { return pieces_; }
  bool empty() const { return pieces_.empty(); }
  bool operator==(const Steps&) const = default;

 private:
  std::vector<Step> pieces_;
};

}  // namespace gpuex::matching
