// The reference matcher's own arithmetic, written from DESIGN.md §3-§4 and docs/market-rules.md and sharing no
// code with matching/: free capacity over time (brute force over a list of changes), the cost of GPU time, the
// green-discounted effective price, the green tier of a pool, and the month bucket of an instant. Only the
// engine's plain types (Price, Qty, Seconds, Bucket, the policy's rows) are used, as data.
//
// tests/matching/reference_independence_test.cpp checks that reference_matcher.cpp keeps to these.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include "matching/types.hpp"

namespace gpuex::matching::test::ref {

// One piece of a step function: `gpus` over [from, to).
struct Segment {
  Seconds from;
  Seconds to;
  std::int64_t gpus{0};
  bool operator==(const Segment&) const = default;
};

// An ask's free GPUs as a function of time, kept as every change ever made to it: the offer over its window,
// then minus each sale or cut over its own interval; from `closed_from` on (the ask ended) it is 0. The value at
// an instant is the sum of the changes covering it. Every query evaluates that sum at the instants where it can
// change: slow and plainly right.
class FreeCapacity {
 public:
  void add(Seconds from, Seconds to, std::int64_t delta) {
    if (from < to && delta != 0) changes_.push_back(Segment{from, to, delta});
  }
  void close_from(Seconds t) { closed_from_ = closed_from_ ? std::min(*closed_from_, t) : t; }

  std::int64_t at(Seconds t) const {
    if (closed_from_ && t >= *closed_from_) return 0;
    std::int64_t sum = 0;
    for (const Segment& c : changes_)
      if (c.from <= t && t < c.to) sum += c.gpus;
    return sum;
  }

  // Every instant where the value may change, sorted, without repeats.
  std::vector<Seconds> breakpoints() const {
    std::vector<Seconds> ts;
    for (const Segment& c : changes_) {
      ts.push_back(c.from);
      ts.push_back(c.to);
    }
    if (closed_from_) ts.push_back(*closed_from_);
    std::sort(ts.begin(), ts.end());
    ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
    return ts;
  }

  // The value is constant between consecutive breakpoints, so it is enough to look at `from` and at every
  // breakpoint inside (from, to). 0 for an empty interval.
  std::int64_t min(Seconds from, Seconds to) const {
    if (from >= to) return 0;
    std::int64_t m = at(from);
    for (Seconds t : breakpoints())
      if (from < t && t < to) m = std::min(m, at(t));
    return m;
  }

  // GPU-seconds over [from, to).
  std::int64_t integral(Seconds from, Seconds to) const {
    if (from >= to) return 0;
    std::vector<Seconds> ts{from, to};
    for (Seconds t : breakpoints())
      if (from < t && t < to) ts.push_back(t);
    std::sort(ts.begin(), ts.end());
    std::int64_t sum = 0;
    for (std::size_t i = 0; i + 1 < ts.size(); ++i) sum += at(ts[i]) * (ts[i + 1] - ts[i]).value;
    return sum;
  }

  // The function as pieces of constant non-zero value, in time order, neighbours of equal value joined: one
  // form per function, to compare with the engine's (API.md "free, the GPUs it still offers as steps").
  std::vector<Segment> pieces() const {
    std::vector<Segment> out;
    const std::vector<Seconds> ts = breakpoints();
    for (std::size_t i = 0; i + 1 < ts.size(); ++i) {
      const std::int64_t v = at(ts[i]);
      if (v == 0) continue;
      if (!out.empty() && out.back().to == ts[i] && out.back().gpus == v)
        out.back().to = ts[i + 1];
      else
        out.push_back(Segment{ts[i], ts[i + 1], v});
    }
    return out;
  }

 private:
  std::vector<Segment> changes_;
  std::optional<Seconds> closed_from_;
};

// DESIGN.md §3: "A GPU-hour price times GPUs times seconds / 3600 gives a cost; round half to even, once, at the
// end." Exact in 128 bits; costs are never negative.
inline std::int64_t cost_micros(Price price, Qty gpus, Seconds seconds) {
  const Int128 exact_x3600 = static_cast<Int128>(price.value) * gpus.value * seconds.value;
  if (exact_x3600 < 0) throw std::logic_error("reference: negative cost");
  Int128 whole = exact_x3600 / 3600;
  const Int128 rest = exact_x3600 - whole * 3600;  // 0 .. 3599
  if (rest > 1800 || (rest == 1800 && whole % 2 == 1)) whole += 1;
  return static_cast<std::int64_t>(whole);
}

// DESIGN.md §4: "An ask's effective price = its list price x (1 - discount), rounded down to the tick."
// list x (10000 - bps) / 10000 in micro-dollars, then down to a whole number of ticks, in one exact division.
inline Price effective_price(Price list, std::int32_t discount_bps, Price tick) {
  const Int128 num = static_cast<Int128>(list.value) * (10000 - discount_bps);
  const Int128 den = static_cast<Int128>(10000) * tick.value;
  if (num < 0 || den <= 0) throw std::logic_error("reference: bad effective price input");
  return Price(static_cast<std::int64_t>(num / den * tick.value));
}

// DESIGN.md §4 "Green discount": the policy's tiers are tried in order and the first whose bounds all hold
// (PUE at most, renewable share at least, carbon at most) gives the tier and its discount; none gives 0.
struct GreenClass {
  GreenTier tier{GreenTier::none};
  std::int32_t discount_bps{0};
};
template <class Policy, class Energy>
GreenClass green_class(const Policy& policy, const Energy& e) {
  for (const auto& rule : policy.rules) {
    const bool pue_ok = e.pue_x1000 <= rule.max_pue_x1000;
    const bool renewable_ok = e.renewable_pct_x100 >= rule.min_renewable_pct_x100;
    const bool carbon_ok = e.carbon_g_per_kwh_x100 <= rule.max_carbon_g_per_kwh_x100;
    if (pue_ok && renewable_ok && carbon_ok) return GreenClass{rule.tier, rule.discount_bps};
  }
  return GreenClass{};
}

// DESIGN.md §4 "Book views": "the UTC calendar month of the order's start", from the standard calendar.
inline Bucket month_of(Seconds t) {
  using namespace std::chrono;
  const sys_days day = floor<days>(sys_seconds{seconds{t.value}});
  const year_month_day ymd{day};
  return Bucket{static_cast<std::int32_t>(int{ymd.year()} * 100 + static_cast<int>(unsigned{ymd.month()}))};
}

}  // namespace gpuex::matching::test::ref
