// Step function arithmetic; every operation rebuilds the (short) piece vector in one pass.
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

}  // namespace

void Steps::add(Seconds from, Seconds to, std::int64_t delta) {
  if (from >= to || delta == 0) return;
  std::vector<Step> out;
  out.reserve(pieces_.size() + 3);
  Seconds cursor = from;  // first point of [from, to) not yet written
  for (const Step& p : pieces_) {
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
  pieces_ = std::move(out);
}

std::int64_t Steps::min(Seconds from, Seconds to) const {
  if (from >= to) return 0;
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  Seconds cursor = from;
  for (const Step& p : pieces_) {
    if (p.to <= from) continue;
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
  for (const Step& p : pieces_) {
    if (p.to <= from) continue;
    if (p.from >= to) break;
    if (p.from > cursor) best = std::max<std::int64_t>(best, 0);
    best = std::max(best, p.gpus);
    cursor = p.to;
  }
  if (cursor < to) best = std::max<std::int64_t>(best, 0);
  return best;
}

std::int64_t Steps::at(Seconds t) const {
  for (const Step& p : pieces_) {
    if (p.from > t) break;
    if (t < p.to) return p.gpus;
  }
  return 0;
}

std::int64_t Steps::integral(Seconds from, Seconds to) const {
  std::int64_t sum = 0;
  for (const Step& p : pieces_) {
    const Seconds s = std::max(p.from, from);
    const Seconds e = std::min(p.to, to);
    if (s < e) sum += p.gpus * (e - s).value;
  }
  return sum;
}

void Steps::trim_before(Seconds t) {
  std::vector<Step> out;
  out.reserve(pieces_.size());
  for (const Step& p : pieces_) {
    if (p.to <= t) continue;
    push(out, std::max(p.from, t), p.to, p.gpus);
  }
  pieces_ = std::move(out);
}

void Steps::clear_from(Seconds t) {
  std::vector<Step> out;
  out.reserve(pieces_.size());
  for (const Step& p : pieces_) {
    if (p.from >= t) break;
    push(out, p.from, std::min(p.to, t), p.gpus);
  }
  pieces_ = std::move(out);
}

}  // namespace gpuex::matching
