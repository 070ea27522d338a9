// The engine's pending time events (an order's next expiry or step, a lease's next transition, a pool's
// verification expiry) as a min-heap by (at, kind, id).
#pragma once

#include <algorithm>
#include <compare>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "matching/types.hpp"

namespace gpuex::matching {

enum class TimerKind : std::uint8_t { order, lease, pool };

// 16 bytes: the kind in the top two bits of the id word (order, lease and pool ids are command sequence
// numbers or counters from 1, far below 2^62). Ordered by (at, kind, id); the time step collects what is due
// in sets, so the order among equal times does not show anyway.
struct Timer {
  Seconds at;
  std::uint64_t word{0};
  Timer(Seconds t, TimerKind k, std::int64_t id)
      : at(t), word((std::uint64_t{static_cast<std::uint8_t>(k)} << 62) | static_cast<std::uint64_t>(id)) {
    if (id < 0 || id >= (std::int64_t{1} << 62)) throw std::logic_error("timer id out of range");
  }
  TimerKind kind() const { return static_cast<TimerKind>(word >> 62); }
  std::int64_t id() const { return static_cast<std::int64_t>(word & ((std::uint64_t{1} << 62) - 1)); }
  auto operator<=>(const Timer&) const = default;
};

// Timers in two min-heaps: most in 8-byte words, (at << 32) | (lease ? 1 << 31 : 0) | id, whose order as
// integers is the Timers' (at, kind, id) order; the rest whole. A word holds an order's or a lease's timer at
// a time in [0, 2^32) (Unix seconds until 2106) with an id below 2^31 (command sequence numbers and lease
// counters, for the first two billion commands); pools' timers (a few) and any other are kept whole. Half the
// bytes of a heap of Timers: the realistic bench's ~128,000 pending timers (one per open ask and fixed-window
// bid, one or two per lease) took a 2 MiB vector, 10 bytes a resting order. pop() returns the least Timer of
// both heaps, so the order they come out in is a single heap's.
class TimerHeap {
 public:
  bool empty() const { return words_.empty() && whole_.empty(); }
  std::size_t size() const { return words_.size() + whole_.size(); }

  // Whether a timer is due at `now` (the least is at or before it): every command asks.
  bool due(Seconds now) const {
    return (!words_.empty() && static_cast<std::int64_t>(words_.front() >> 32) <= now.value) ||
           (!whole_.empty() && whole_.front().at <= now);
  }

  // The usual timer (an order's or a lease's, at a time and with an id a word holds) pushed here, inlined into the
  // engine's schedule calls (out of line, the call and the Timer passed in memory cost plain ~1 % more
  // instructions); any other in push_whole().
  [[gnu::always_inline]] void push(Seconds at, TimerKind kind, std::int64_t id) {
    if (kind != TimerKind::pool && static_cast<std::uint64_t>(at.value) < (std::uint64_t{1} << 32) &&
        static_cast<std::uint64_t>(id) < kLease) {
      words_.push_back(static_cast<std::uint64_t>(at.value) << 32 | (kind == TimerKind::lease ? kLease : 0) |
                       static_cast<std::uint64_t>(id));
      std::push_heap(words_.begin(), words_.end(), std::greater<>{});
    } else {
      push_whole(Timer(at, kind, id));
    }
  }

  // The least timer, taken out (the heap must not be empty).
  Timer pop() {
    if (whole_.empty() || (!words_.empty() && unpack(words_.front()) < whole_.front())) {
      std::pop_heap(words_.begin(), words_.end(), std::greater<>{});
      const Timer t = unpack(words_.back());
      words_.pop_back();
      return t;
    }
    std::pop_heap(whole_.begin(), whole_.end(), std::greater<>{});
    const Timer t = whole_.back();
    whole_.pop_back();
    return t;
  }

 private:
  static constexpr std::uint64_t kLease = std::uint64_t{1} << 31;
  [[gnu::noinline]] void push_whole(const Timer& t) {
    whole_.push_back(t);
    std::push_heap(whole_.begin(), whole_.end(), std::greater<>{});
  }
  static Timer unpack(std::uint64_t w) {
    return Timer(Seconds(static_cast<std::int64_t>(w >> 32)), (w & kLease) ? TimerKind::lease : TimerKind::order,
                 static_cast<std::int64_t>(w & (kLease - 1)));
  }

  std::vector<std::uint64_t> words_;  // a min-heap of packed timers
  std::vector<Timer> whole_;          // a min-heap of the timers a word does not hold
};

}  // namespace gpuex::matching
