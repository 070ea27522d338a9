// A step function of time with integer values (GPUs): an ask's free capacity, a pool's commitments.
#pragma once

#include <algorithm>
#include <cstdint>
#include <new>
#include <span>
#include <utility>

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
  // Inline, as std::vector's: every Order an event or a query builds copies, moves and destroys one.
  Steps(const Steps& o) { *this = o; }
  Steps(Steps&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  Steps& operator=(const Steps& o) {
    if (this == &o) return *this;
    if (o.n_ > cap_) {
      release();
      p_ = allocate(o.n_);
      cap_ = o.n_;
    }
    std::copy(o.p_, o.p_ + o.n_, p_);
    n_ = o.n_;
    return *this;
  }
  Steps& operator=(Steps&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~Steps() { release(); }

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
  // Sets the value to 0 everywhere, keeping the room for pieces.
  void clear() { n_ = 0; }

  std::span<const Step> pieces() const { return {p_, n_}; }
  bool empty() const { return n_ == 0; }
  bool operator==(const Steps& o) const;

 private:
  // The pieces in one array with 32-bit count and capacity: 16 bytes, not a std::vector's 24 (every open
  // order holds one: an ask's free capacity; a bid's stays empty).
  // Room for `n` pieces, not constructed (a Step is an aggregate: its objects begin where a copy writes them).
  static Step* allocate(std::uint32_t n) { return static_cast<Step*>(::operator new(sizeof(Step) * n)); }
  // Sized, as std::allocator's: jemalloc frees without looking the size up; no call for none (a bid's).
  void release() {
    if (p_) ::operator delete(p_, sizeof(Step) * cap_);
  }
  void splice(std::uint32_t at, std::uint32_t old_n, std::span<const Step> with);
  void erase_front(std::uint32_t k);
  Step* p_{nullptr};
  std::uint32_t n_{0};
  std::uint32_t cap_{0};
};

}  // namespace gpuex::matching
