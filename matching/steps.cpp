// Step function arithmetic: lookups binary-search their first piece; add() rebuilds only the pieces it touches.
#include "matching/steps.hpp"

#include <algorithm>
#include <limits>

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
std::size_t first_ending_after(const std::vector<Step>& v, Seconds t) {
  return static_cast<std::size_t>(
      std::partition_point(v.begin(), v.end(), [&](const Step& p) { return p.to <= t; }) - v.begin());
}

}  // namespace

// Only the pieces that overlap or touch [from, to) are rebuilt (the others cannot merge with the result:
// their neighbours across the boundary keep their values), then spliced in place.
void Steps::add(Seconds from, Seconds to, std::int64_t delta) {
  if (from >= to || delta == 0) return;
  std::vector<Step>& v = pieces_;
  if (v.empty()) {  // a new ask's free capacity: one piece, nothing to splice
    v.push_back(Step{from, to, delta});
    return;
  }
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
      std::ptrdiff_t n = 0;
      if (head) parts[n++] = Step{p.from, from, p.gpus};
      if (mid != 0) parts[n++] = Step{from, to, mid};
      parts[n++] = Step{to, p.to, p.gpus};
      v[lo] = parts[0];
      v.insert(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, parts + 1, parts + n);
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
  const std::size_t old_n = hi - lo;
  const std::size_t new_n = out.size();
  const auto at = v.begin() + static_cast<std::ptrdiff_t>(lo);
  if (new_n > old_n) {
    v.insert(at + static_cast<std::ptrdiff_t>(old_n), new_n - old_n, Step{});
  } else if (new_n < old_n) {
    v.erase(at + static_cast<std::ptrdiff_t>(new_n), at + static_cast<std::ptrdiff_t>(old_n));
  }
  std::copy(out.begin(), out.end(), v.begin() + static_cast<std::ptrdiff_t>(lo));
}

std::int64_t Steps::min(Seconds from, Seconds to) const {
  if (from >= to) return 0;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  Seconds cursor = from;
  for (std::size_t i = first_ending_after(pieces_, from); i < pieces_.size(); ++i) {
    const Step& p = pieces_[i];
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
  for (std::size_t i = first_ending_after(pieces_, from); i < pieces_.size(); ++i) {
    const Step& p = pieces_[i];
    if (p.from >= to) break;
    if (p.from > cursor) best = std::max<std::int64_t>(best, 0);
    best = std::max(best, p.gpus);
    cursor = p.to;
  }
  if (cursor < to) best = std::max<std::int64_t>(best, 0);
  return best;
}

std::int64_t Steps::at(Seconds t) const {
  const std::size_t i = first_ending_after(pieces_, t);
  return i < pieces_.size() && pieces_[i].from <= t ? pieces_[i].gpus : 0;
}

std::int64_t Steps::integral(Seconds from, Seconds to) const {
  if (from >= to) return 0;  // e.g. the lapsed part of an ask whose window starts now: no search
  std::int64_t sum = 0;
  for (std::size_t i = first_ending_after(pieces_, from); i < pieces_.size(); ++i) {
    const Step& p = pieces_[i];
    if (p.from >= to) break;
    const Seconds s = std::max(p.from, from);
    const Seconds e = std::min(p.to, to);
    if (s < e) sum += p.gpus * (e - s).value;
  }
  return sum;
}

void Steps::trim_before(Seconds t) {
  const std::size_t i = first_ending_after(pieces_, t);
  pieces_.erase(pieces_.begin(), pieces_.begin() + static_cast<std::ptrdiff_t>(i));
  if (!pieces_.empty() && pieces_.front().from < t) pieces_.front().from = t;
}

void Steps::clear_from(Seconds t) {
  std::size_t i = first_ending_after(pieces_, t);
  if (i < pieces_.size() && pieces_[i].from < t) {
    pieces_[i].to = t;
    ++i;
  }
  pieces_.erase(pieces_.begin() + static_cast<std::ptrdiff_t>(i), pieces_.end());
}

}  // namespace gpuex::matching
