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
  // The piece's GPU-seconds within [a, b) (0 outside it).
  std::int64_t gpu_seconds(Seconds a, Seconds b) const {
    return gpus * std::max<std::int64_t>(0, (std::min(b, to) - std::max(a, from)).value);
  }
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
  // A SmallSteps' inline piece is not taken: it is copied (one piece: the array's move would dangle).
  Steps(Steps&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), cap_(std::exchange(o.cap_, 0)) {
    if (cap_ & kBorrowed) [[unlikely]] own();
  }
  Steps& operator=(const Steps& o) {
    if (this == &o) return *this;
    if (o.n_ > capacity()) {
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
      if (o.cap_ & kBorrowed) [[unlikely]] {
        *this = static_cast<const Steps&>(o);
        o.n_ = 0;
        return *this;
      }
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~Steps() { release(); }

  // Adds `delta` over [from, to). To no pieces (a new ask's free capacity, often a spare record's, cleared) by
  // hand, inline, as integral(): one piece, nothing to splice; the call and its frame cost ~25 instructions a
  // new ask in the plain bench. always_inline: GCC kept a copy out of line for the fills, a second call there.
  [[gnu::always_inline]] void add(Seconds from, Seconds to, std::int64_t delta) {
    if (n_ == 0 && from < to && delta != 0) {
      if (cap_ == 0) {
        p_ = allocate(1);
        cap_ = 1;
      }
      p_[0] = Step{from, to, delta};
      n_ = 1;
      return;
    }
    add_to_pieces(from, to, delta);
  }
  // Smallest / largest value over [from, to) (gaps count as 0); 0 for an empty interval. min() of one piece (an
  // ask no fill has split) by hand, inline, as integral().
  std::int64_t min(Seconds from, Seconds to) const {
    if (n_ == 1 && from < to) {
      const Step& p = p_[0];
      if (p.to <= from || p.from >= to) return 0;
      return p.from <= from && p.to >= to ? p.gpus : std::min<std::int64_t>(p.gpus, 0);  // else a gap
    }
    return min_of_pieces(from, to);
  }
  std::int64_t max(Seconds from, Seconds to) const;
  // Value at one instant; one piece by hand, inline, as integral().
  std::int64_t at(Seconds t) const {
    if (n_ == 1) return p_[0].from <= t && p_[0].to > t ? p_[0].gpus : 0;
    return at_of_pieces(t);
  }
  // Integral over [from, to) in GPU-seconds. One piece (an ask no fill has split, most of those cancelled) by
  // hand, inline: the search of integral_of_pieces() is ~50 instructions a call.
  std::int64_t integral(Seconds from, Seconds to) const {
    if (n_ == 1) return p_[0].gpu_seconds(from, to);
    return integral_of_pieces(from, to);
  }
  // Drops everything before `t` (history a pool no longer needs).
  void trim_before(Seconds t);
  // Sets the value to 0 from `t` on. One piece by hand, inline (as integral()): the search of
  // clear_pieces_from() is ~30 instructions a call.
  void clear_from(Seconds t) {
    if (n_ == 1) {
      if (p_[0].from >= t) {
        n_ = 0;
      } else if (p_[0].to > t) {
        p_[0].to = t;
      }
      return;
    }
    clear_pieces_from(t);
  }
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
  // Sized, as std::allocator's: jemalloc frees without looking the size up; no call for none (a bid's), nor
  // for a SmallSteps' inline piece.
  void release() {
    if (p_ && !(cap_ & kBorrowed)) ::operator delete(p_, sizeof(Step) * cap_);
  }
  // The pieces moved from a borrowed place (a SmallSteps' inline piece) into an array of this one's own.
  void own();
  void add_to_pieces(Seconds from, Seconds to, std::int64_t delta);
  std::int64_t integral_of_pieces(Seconds from, Seconds to) const;
  std::int64_t min_of_pieces(Seconds from, Seconds to) const;
  std::int64_t at_of_pieces(Seconds t) const;
  void clear_pieces_from(Seconds t);
  void splice(std::uint32_t at, std::uint32_t old_n, std::span<const Step> with);
  void erase_front(std::uint32_t k);

 protected:
  // cap_'s top bit: p_ points into storage this Steps does not own (a SmallSteps' inline piece; capacity 1).
  static constexpr std::uint32_t kBorrowed = 0x8000'0000u;
  std::uint32_t capacity() const { return cap_ & ~kBorrowed; }
  Steps(Step* p, std::uint32_t n, std::uint32_t cap) : p_(p), n_(n), cap_(cap) {}
  // Replaces the pieces with `v`'s, in an array of its own.
  void assign_pieces(std::span<const Step> v);
  Step* p_{nullptr};
  std::uint32_t n_{0};
  std::uint32_t cap_{0};
};

// A Steps with room for one piece inline: an Order's free capacity. Every order event copies its ask's
// free capacity, which is one piece until a fill splits it; kept inline, that copy allocates nothing (and
// the event's consumer frees nothing). The engine's own Steps stay 16 bytes. Read it as a Steps; moved or
// copied into a plain Steps, the inline piece is copied into an array.
class SmallSteps : public Steps {
 public:
  SmallSteps() {}  // NOLINT(modernize-use-equals-default): one_ stays unset until it holds a piece
  // NOLINTNEXTLINE(google-explicit-constructor): an Order's free capacity is set from a Steps.
  SmallSteps(const Steps& o) : SmallSteps(o.pieces()) {}
  SmallSteps(const SmallSteps& o) : SmallSteps(o.pieces()) {}
  SmallSteps(SmallSteps&& o) noexcept { take(o); }
  SmallSteps& operator=(const Steps& o) {
    if (this != &o) {
      if (o.pieces().size() <= 1) {
        release_own();
        point_inline(o.pieces());
      } else {
        assign_pieces(o.pieces());  // into its own array when that has room
      }
    }
    return *this;
  }
  SmallSteps& operator=(const SmallSteps& o) { return *this = static_cast<const Steps&>(o); }
  SmallSteps& operator=(SmallSteps&& o) noexcept {
    if (this != &o) {
      release_own();
      take(o);
    }
    return *this;
  }
  ~SmallSteps() = default;

 private:
  // Pieces that fit inline go inline; more are copied into an array (out of line: the callers, make_order
  // among them, keep only the inline copy's few instructions). Each member written once.
  explicit SmallSteps(std::span<const Step> v)
      : Steps(v.size() <= 1 ? &one_ : nullptr, v.size() <= 1 ? static_cast<std::uint32_t>(v.size()) : 0,
              v.size() <= 1 ? kBorrowed | 1 : 0) {
    if (v.size() == 1) {
      one_ = v[0];
    } else if (v.size() > 1) {
      assign_pieces(v);
    }
  }
  void take(SmallSteps& o) noexcept {
    if (o.cap_ & kBorrowed) {
      point_inline(o.pieces());
      o.n_ = 0;
    } else {
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
  }
  // Back to empty, with no array of its own.
  void release_own() noexcept { Steps::operator=(Steps()); }
  // `v` (at most one piece) into the inline piece.
  void point_inline(std::span<const Step> v) noexcept {
    if (!v.empty()) one_ = v[0];
    p_ = &one_;
    n_ = static_cast<std::uint32_t>(v.size());
    cap_ = kBorrowed | 1;
  }
  union {
    Step one_;  // the piece while cap_ is kBorrowed | 1 and n_ is 1; unset otherwise
  };
};

}  // namespace gpuex::matching
