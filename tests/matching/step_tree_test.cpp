// StepTree (a pool's commitments) against a brute-force array of values per second.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
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
