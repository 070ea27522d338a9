// Step function arithmetic: lookups binary-search their first piece; add() rebuilds only the pieces it touches.
#include "matching/steps.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace gpuex::matching {
namespace {

void push(std::vector<Step>& out, Seconds from, Seconds to, std::int64_t gpus) {
  if (from >= to || gpus == 0) return;
  if (!out.empty() && out.back().to == from && out.back().gpus == gpus) {
    out.back().to = to;
    return;
  }
  out.push_back(Step{from, to, gpus});
}

// First piece with to > t (the pieces are sorted and disjoint, so their ends ascend).
std::size_t first_ending_after(std::span<const Step> v, Seconds t) {
  return static_cast<std::size_t>(
      std::partition_point(v.begin(), v.end(), [&](const Step& p) { return p.to <= t; }) - v.begin());
}

}  // namespace

bool Steps::operator==(const Steps& o) const { return std::ranges::equal(pieces(), o.pieces()); }

// Replaces the `old_n` pieces from `at` with `with` (the array grows as a vector's would: doubling). The
// copies are loops: a few pieces each, where std::copy would call memmove even for none.
void Steps::splice(std::uint32_t at, std::uint32_t old_n, std::span<const Step> with) {
  const auto new_n = static_cast<std::uint32_t>(with.size());
  const std::uint32_t n = n_ - old_n + new_n;
  if (n > capacity()) {
    const std::uint32_t cap = std::max(n, 2 * capacity());
    Step* q = allocate(cap);
    for (std::uint32_t i = 0; i < at; ++i) q[i] = p_[i];
    for (std::uint32_t i = at + old_n; i < n_; ++i) q[i - old_n + new_n] = p_[i];
    release();
    p_ = q;
    cap_ = cap;
  } else if (new_n < old_n) {
    for (std::uint32_t i = at + old_n; i < n_; ++i) p_[i - old_n + new_n] = p_[i];
  } else if (new_n > old_n) {
    for (std::uint32_t i = n_; i-- > at + old_n;) p_[i - old_n + new_n] = p_[i];
  }
  for (std::uint32_t i = 0; i < new_n; ++i) p_[at + i] = with[i];
  n_ = n;
}

void Steps::own() {
  const Step* from = p_;
  p_ = nullptr;
  cap_ = 0;
  if (n_ == 0) return;
  p_ = allocate(n_);
  cap_ = n_;
  std::copy(from, from + n_, p_);
}

void Steps::assign_pieces(std::span<const Step> v) {
  const auto n = static_cast<std::uint32_t>(v.size());
  if (n > capacity() || (cap_ & kBorrowed)) {
    release();
    p_ = allocate(n);
    cap_ = n;
  }
  std::copy(v.begin(), v.end(), p_);
  n_ = n;
}

void Steps::erase_front(std::uint32_t k) {
  if (k == 0) return;
  for (std::uint32_t i = k; i < n_; ++i) p_[i - k] = p_[i];
  n_ -= k;
}

// Only the pieces that overlap or touch [from, to) are rebuilt (the others cannot merge with the result:
// their neighbours across the boundary keep their values), then spliced in place.
void Steps::add_to_pieces(Seconds from, Seconds to, std::int64_t delta) {
  if (from >= to || delta == 0) return;
  const std::span<const Step> v = pieces();  // not empty (add())
  const auto lo = static_cast<std::size_t>(
      std::partition_point(v.begin(), v.end(), [&](const Step& p) { return p.to < from; }) - v.begin());
  if (lo < v.size() && v[lo].from <= from && to < v[lo].to) {
    // Inside one piece, short of its end (a fill of a one-piece ask): the piece splits in place into its part
    // before `from` (if any), the changed middle (unless 0) and its rest after `to`, none of which can merge
    // with a neighbour, but for a middle that starts the piece and equals the piece before it (the general
    // path below then merges them).
    const Step p = v[lo];
    const std::int64_t mid = p.gpus + delta;
    const bool head = p.from < from;
    if (head || mid == 0 || lo == 0 || v[lo - 1].to < from || v[lo - 1].gpus != mid) {
      Step parts[3];
      std::size_t n = 0;
      if (head) parts[n++] = Step{p.from, from, p.gpus};
      if (mid != 0) parts[n++] = Step{from, to, mid};
      parts[n++] = Step{to, p.to, p.gpus};
      splice(static_cast<std::uint32_t>(lo), 1, std::span<const Step>(parts, n));
      return;
    }
  }
  std::size_t hi = lo;
  while (hi < v.size() && v[hi].from <= to) ++hi;
  thread_local std::vector<Step> out;
  out.clear();
  Seconds cursor = from;  // first point of [from, to) not yet written
  for (std::size_t i = lo; i < hi; ++i) {
    const Step p = v[i];
    if (p.to <= from) {
      push(out, p.from, p.to, p.gpus);
      continue;
    }
    if (p.from >= to) {
      if (cursor < to) push(out, cursor, to, delta);
      cursor = to;
      push(out, p.from, p.to, p.gpus);
      continue;
    }
    if (p.from < from) push(out, p.from, from, p.gpus);
    const Seconds s = std::max(p.from, from);
    if (cursor < s) push(out, cursor, s, delta);
    const Seconds e = std::min(p.to, to);
    push(out, s, e, p.gpus + delta);
    cursor = e;
    if (p.to > to) push(out, to, p.to, p.gpus);
  }
  if (cursor < to) push(out, cursor, to, delta);
  splice(static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi - lo), out);
}

std::int64_t Steps::min_of_pieces(Seconds from, Seconds to) const {
  if (from >= to) return 0;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  Seconds cursor = from;
  for (std::size_t i = first_ending_after(pieces(), from); i < n_; ++i) {
    const Step& p = p_[i];
    if (p.from >= to) break;
    if (p.from > cursor) best = std::min<std::int64_t>(best, 0);  // a gap
    best = std::min(best, p.gpus);
    cursor = p.to;
  }
  if (cursor < to) best = std::min<std::int64_t>(best, 0);
  return best;
}

std::int64_t Steps::max(Seconds from, Seconds to) const {
  if (from >= to) return 0;
  std::int64_t best = std::numeric_limits<std::int64_t>::min();
  Seconds cursor = from;
  for (std::size_t i = first_ending_after(pieces(), from); i < n_; ++i) {
    const Step& p = p_[i];
    if (p.from >= to) break;
    if (p.from > cursor) best = std::max<std::int64_t>(best, 0);
    best = std::max(best, p.gpus);
    cursor = p.to;
  }
  if (cursor < to) best = std::max<std::int64_t>(best, 0);
  return best;
}

std::int64_t Steps::at_of_pieces(Seconds t) const {
  const std::size_t i = first_ending_after(pieces(), t);
  return i < n_ && p_[i].from <= t ? p_[i].gpus : 0;
}

std::int64_t Steps::integral_of_pieces(Seconds from, Seconds to) const {
  if (from >= to) return 0;  // e.g. the lapsed part of an ask whose window starts now: no search
  std::int64_t sum = 0;
  for (std::size_t i = first_ending_after(pieces(), from); i < n_; ++i) {
    const Step& p = p_[i];
    if (p.from >= to) break;
    sum += p.gpu_seconds(from, to);
  }
  return sum;
}

void Steps::trim_before(Seconds t) {
  erase_front(static_cast<std::uint32_t>(first_ending_after(pieces(), t)));
  if (n_ > 0 && p_[0].from < t) p_[0].from = t;
}

void Steps::clear_pieces_from(Seconds t) {
  auto i = static_cast<std::uint32_t>(first_ending_after(pieces(), t));
  if (i < n_ && p_[i].from < t) {
    p_[i].to = t;
    ++i;
  }
  n_ = i;
}

}  // namespace gpuex::matching
