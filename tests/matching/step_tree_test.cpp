// StepTree (a pool's commitments) against a brute-force array of values per second.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "matching/step_tree.hpp"

using namespace gpuex::matching;

namespace {

constexpr int kSpan = 240;  // times 0..kSpan-1; the value is 0 at and after kSpan

std::int64_t brute_max(const std::vector<std::int64_t>& v, int from, int to) {
  if (from >= to) return 0;
  std::int64_t best = v[static_cast<std::size_t>(from)];
  for (int t = from; t < to; ++t) best = std::max(best, t < kSpan ? v[static_cast<std::size_t>(t)] : 0);
  return best;
}

}  // namespace

TEST_CASE("a step tree adds over intervals and answers the largest value over any interval", "[steps]") {
  StepTree tree;
  tree.add(Seconds(10), Seconds(20), 5);
  tree.add(Seconds(15), Seconds(30), 3);
  CHECK(tree.max(Seconds(0), Seconds(10)) == 0);
  CHECK(tree.max(Seconds(0), Seconds(11)) == 5);
  CHECK(tree.max(Seconds(12), Seconds(16)) == 8);
  CHECK(tree.max(Seconds(20), Seconds(40)) == 3);
  CHECK(tree.max(Seconds(30), Seconds(40)) == 0);
  tree.add(Seconds(15), Seconds(30), -3);
  CHECK(tree.max(Seconds(0), Seconds(100)) == 5);
  CHECK(tree.to_steps() == Steps(Seconds(10), Seconds(20), 5));
  tree.trim_before(Seconds(12));
  CHECK(tree.to_steps() == Steps(Seconds(12), Seconds(20), 5));
  // Nothing left before 12 (or 3): the same function.
  tree.trim_before(Seconds(12));
  tree.trim_before(Seconds(3));
  CHECK(tree.to_steps() == Steps(Seconds(12), Seconds(20), 5));
  CHECK(tree.max_all() == 5);
  tree.add(Seconds(12), Seconds(20), -7);
  CHECK(tree.max_all() == 0);  // -2 over [12, 20), 0 elsewhere
  CHECK(StepTree().max_all() == 0);
}

TEST_CASE("a moved-from step tree is empty and usable, also after its nodes were freed", "[steps]") {
  StepTree tree;
  tree.add(Seconds(10), Seconds(20), 5);
  tree.add(Seconds(10), Seconds(20), -5);  // both changes leave: their nodes are on the free chain
  StepTree moved(std::move(tree));
  CHECK(moved.max_all() == 0);
  CHECK(tree.max_all() == 0);  // NOLINT(bugprone-use-after-move): the state a move leaves is what is tested
  tree.add(Seconds(1), Seconds(4), 7);
  moved.add(Seconds(2), Seconds(3), 2);
  CHECK(tree.to_steps() == Steps(Seconds(1), Seconds(4), 7));
  CHECK(moved.to_steps() == Steps(Seconds(2), Seconds(3), 2));
  StepTree assigned;
  assigned.add(Seconds(5), Seconds(6), 1);
  assigned.add(Seconds(5), Seconds(6), -1);
  tree = std::move(assigned);
  CHECK(tree.max_all() == 0);
  assigned.add(Seconds(8), Seconds(9), 3);  // NOLINT(bugprone-use-after-move)
  CHECK(assigned.to_steps() == Steps(Seconds(8), Seconds(9), 3));
}

TEST_CASE("a step tree agrees with a value per second over random changes", "[steps]") {
  std::mt19937_64 rng(20261130);
  for (int round = 0; round < 40; ++round) {
    StepTree tree;
    std::vector<std::int64_t> v(kSpan, 0);
    int trimmed = 0;  // values before this were dropped (0 in both)
    for (int op = 0; op < 300; ++op) {
      const int a = trimmed + static_cast<int>(rng() % static_cast<unsigned>(kSpan - trimmed));
      const int b = a + 1 + static_cast<int>(rng() % static_cast<unsigned>(kSpan - a));
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 6) {
        const std::int64_t d = static_cast<std::int64_t>(rng() % 9) - 3;
        tree.add(Seconds(a), Seconds(b), d);
        for (int t = a; t < b && t < kSpan; ++t) v[static_cast<std::size_t>(t)] += d;
      } else if (kind < 9) {
        REQUIRE(tree.max(Seconds(a), Seconds(b)) == brute_max(v, a, b));
        REQUIRE(tree.max_all() == std::max<std::int64_t>(0, brute_max(v, 0, kSpan)));
      } else if (rng() % 4 == 0) {
        tree.trim_before(Seconds(a));
        for (int t = 0; t < a; ++t) v[static_cast<std::size_t>(t)] = 0;
        trimmed = std::max(trimmed, a);
      }
    }
    Steps expect;
    for (int t = 0; t < kSpan; ++t) expect.add(Seconds(t), Seconds(t + 1), v[static_cast<std::size_t>(t)]);
    CHECK(tree.to_steps() == expect);
    for (int t = 0; t < kSpan; ++t) REQUIRE(tree.max(Seconds(t), Seconds(t + 1)) == v[static_cast<std::size_t>(t)]);
  }
}

TEST_CASE("a step tree of many chunks agrees with a value per second, and so do its copies", "[steps]") {
  // Thousands of changes: many chunks (splits, joins, chunks emptied and trims across several of them) under a
  // segment tree of several levels; the checks at random intervals. A copy taken midway must not share its chunks.
  constexpr int kWide = 3000;
  std::mt19937_64 rng(20261203);
  for (int round = 0; round < 4; ++round) {
    StepTree tree;
    std::vector<std::int64_t> v(kWide, 0);
    const auto max_of = [&](int from, int to) {
      if (from >= to) return std::int64_t{0};
      std::int64_t best = from < kWide ? v[static_cast<std::size_t>(from)] : 0;
      for (int t = from; t < to; ++t) best = std::max(best, t < kWide ? v[static_cast<std::size_t>(t)] : 0);
      return best;
    };
    int trimmed = 0;
    StepTree copy;
    std::vector<std::int64_t> copied;
    struct Added {
      int a;
      int b;
      std::int64_t d;
    };
    std::vector<Added> added;  // taken back at random (add(a, b, -d)), so that changes cancel and leave
    for (int op = 0; op < 6000; ++op) {
      const int a = trimmed + static_cast<int>(rng() % static_cast<unsigned>(kWide - trimmed));
      const int span = std::min(kWide - a, rng() % 2 == 0 ? 40 : kWide);
      const int b = a + 1 + static_cast<int>(rng() % static_cast<unsigned>(span));
      const int kind = static_cast<int>(rng() % 20);
      if (kind < 8 || (kind < 14 && added.empty())) {
        const std::int64_t d = static_cast<std::int64_t>(rng() % 9) - 4;
        tree.add(Seconds(a), Seconds(b), d);
        for (int t = a; t < b && t < kWide; ++t) v[static_cast<std::size_t>(t)] += d;
        if (a > trimmed) added.push_back({a, b, d});
      } else if (kind < 14) {
        const std::size_t i = rng() % added.size();
        const Added x = added[i];
        added[i] = added.back();
        added.pop_back();
        if (x.a < trimmed) continue;  // its start was trimmed away: its change there is no longer its own
        tree.add(Seconds(x.a), Seconds(x.b), -x.d);
        for (int t = x.a; t < x.b && t < kWide; ++t) v[static_cast<std::size_t>(t)] -= x.d;
      } else if (kind < 19) {
        REQUIRE(tree.max(Seconds(a), Seconds(b)) == max_of(a, b));
        REQUIRE(tree.max_all() == std::max<std::int64_t>(0, max_of(0, kWide)));
      } else if (rng() % 8 == 0) {
        const int to = std::min(kWide - 1, trimmed + static_cast<int>(rng() % 200));
        tree.trim_before(Seconds(to));
        for (int t = 0; t < to; ++t) v[static_cast<std::size_t>(t)] = 0;
        trimmed = std::max(trimmed, to);
      }
      if (op == 2000) {
        copy = tree;
        copied = v;
      }
    }
    Steps expect;
    for (int t = 0; t < kWide; ++t) expect.add(Seconds(t), Seconds(t + 1), v[static_cast<std::size_t>(t)]);
    CHECK(tree.to_steps() == expect);
    Steps expect_copy;
    for (int t = 0; t < kWide; ++t) expect_copy.add(Seconds(t), Seconds(t + 1), copied[static_cast<std::size_t>(t)]);
    CHECK(copy.to_steps() == expect_copy);
    const StepTree again(copy);
    CHECK(again.to_steps() == expect_copy);
  }
}

TEST_CASE("Steps::add agrees with a value per second and keeps one representation", "[steps]") {
  // Adds over random intervals, many of them inside one piece (the in-place split) and some that end a
  // piece's middle at 0 or equal to the piece before; the pieces must equal those built second by second
  // (appends: merged, no zero pieces), and every lookup the brute-force values.
  std::mt19937_64 rng(20261201);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::int64_t> v(kSpan, 0);
    Steps s;
    for (int op = 0; op < 40; ++op) {
      const int a = static_cast<int>(rng() % kSpan);
      const int b = std::min(kSpan, a + 1 + static_cast<int>(rng() % (rng() % 2 == 0 ? 8U : static_cast<unsigned>(kSpan - a))));
      const std::int64_t d = static_cast<std::int64_t>(rng() % 7) - 3;
      s.add(Seconds(a), Seconds(b), d);
      for (int t = a; t < b && t < kSpan; ++t) v[static_cast<std::size_t>(t)] += d;
      Steps expect;
      for (int t = 0; t < kSpan; ++t) expect.add(Seconds(t), Seconds(t + 1), v[static_cast<std::size_t>(t)]);
      REQUIRE(s == expect);
    }
    for (int t = 0; t < kSpan; ++t) REQUIRE(s.at(Seconds(t)) == v[static_cast<std::size_t>(t)]);
  }
}

TEST_CASE("Steps' reads and clear_from of one piece agree with a value per second", "[steps]") {
  // One piece (an ask's free capacity before a fill splits it) has its own inline paths in min, at, integral
  // and clear_from: each must answer as the values per second do, for windows inside, across and outside it.
  constexpr int kTimes = 24;
  for (const std::int64_t gpus : {std::int64_t{-2}, std::int64_t{3}}) {
    for (int from = 0; from < kTimes; from += 3) {
      for (int to = from + 1; to <= kTimes; to += 4) {
        const Steps one(Seconds(from), Seconds(to), gpus);
        REQUIRE(one.pieces().size() == 1);
        const auto value = [&](int t) { return t >= from && t < to ? gpus : std::int64_t{0}; };
        for (int a = 0; a <= kTimes + 2; ++a) {
          CHECK(one.at(Seconds(a)) == value(a));
          for (int b = a; b <= kTimes + 2; ++b) {
            std::int64_t least = 0;
            std::int64_t sum = 0;
            for (int t = a; t < b; ++t) {
              least = t == a ? value(t) : std::min(least, value(t));
              sum += value(t);
            }
            CHECK(one.min(Seconds(a), Seconds(b)) == least);
            CHECK(one.integral(Seconds(a), Seconds(b)) == sum);
          }
          Steps cleared = one;
          cleared.clear_from(Seconds(a));
          Steps expect;
          for (int t = 0; t < std::min(a, kTimes); ++t) expect.add(Seconds(t), Seconds(t + 1), value(t));
          CHECK(cleared == expect);
        }
      }
    }
  }
}

TEST_CASE("SmallSteps holds one piece inline and behaves as the Steps it copies", "[steps]") {
  const Steps one(Seconds(10), Seconds(20), 5);
  Steps two = one;
  two.add(Seconds(12), Seconds(14), -2);  // three pieces
  REQUIRE(two.pieces().size() == 3);

  SmallSteps a = one;  // inline
  CHECK(a == one);
  CHECK(a.pieces().size() == 1);
  SmallSteps b = two;  // an array
  CHECK(b == two);

  // Copies and moves keep the values, inline or not, and leave no piece pointing into another object.
  SmallSteps c = a;
  SmallSteps d = std::move(c);
  CHECK(d == one);
  const auto dp = reinterpret_cast<std::uintptr_t>(d.pieces().data());  // d's own inline piece, not c's
  const auto dself = reinterpret_cast<std::uintptr_t>(&d);
  CHECK((dp >= dself && dp < dself + sizeof(d)));
  SmallSteps e = b;
  SmallSteps f = std::move(e);
  CHECK(f == two);
  f = d;
  CHECK(f == one);
  d = two;
  CHECK(d == two);

  // Into a plain Steps (an ask restored from an Order): the inline piece is copied, the source may go.
  Steps g;
  {
    SmallSteps h = one;
    g = std::move(h);
  }
  CHECK(g == one);
  Steps i = [&] {
    SmallSteps h = one;
    return Steps(std::move(h));
  }();
  CHECK(i == one);

  // Growing past the inline piece moves the pieces to an array.
  SmallSteps j = one;
  j.add(Seconds(12), Seconds(14), -2);
  CHECK(j == two);
  j.add(Seconds(30), Seconds(40), 1);
  Steps expect = two;
  expect.add(Seconds(30), Seconds(40), 1);
  CHECK(j == expect);
  SmallSteps k;
  CHECK(k.empty());
  k.add(Seconds(1), Seconds(2), 3);
  CHECK(k == Steps(Seconds(1), Seconds(2), 3));
}
