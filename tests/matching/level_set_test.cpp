// LevelSet (the book sets of asks and duration bids) against std::set, with few prices so that levels hold
// more keys than one vector takes (kKeys) and split into sublevels, and with many prices (levels in many
// chunks, where locate() starts from its hints), on grids of prices of step 1 and of 100.
#include <catch2/catch.hpp>

#include <cstdint>
#include <iterator>
#include <random>
#include <set>
#include <vector>

#include "matching/level_set.hpp"

using namespace gpuex::matching;

namespace {

struct Key {
  std::int64_t price;
  std::int64_t priority;
  std::int64_t payload{0};  // not part of the order (replace() overwrites it)
};

// Highest price first, as the bids' order (level: order-reversing).
struct KeyLess {
  bool operator()(const Key& a, const Key& b) const {
    if (a.price != b.price) return a.price > b.price;
    return a.priority < b.priority;
  }
  static std::int64_t level(const Key& k) { return ~k.price; }
  static bool in_level(const Key& a, const Key& b) { return a.priority < b.priority; }
};

using Set = LevelSet<Key, KeyLess>;

void check_same(const Set& s, const std::set<Key, KeyLess>& ref) {
  REQUIRE(s.size() == ref.size());
  auto r = ref.begin();
  for (auto it = s.begin(); it != s.end(); ++it, ++r) {
    REQUIRE(r != ref.end());
    REQUIRE(it->price == r->price);
    REQUIRE(it->priority == r->priority);
    REQUIRE(it->payload == r->payload);
  }
  REQUIRE(r == ref.end());
}

}  // namespace

TEST_CASE("LevelSet keeps std::set's order through sublevels", "[level_set]") {
  std::mt19937_64 rng(GENERATE(1u, 2u, 3u));
  const std::uint64_t prices = GENERATE(4u, 300u);
  // Prices on a grid of this step (a book's tick: the hints' hash fits the levels' step), 1 in 100 off it.
  const std::int64_t tick = GENERATE(1, 100);
  Set s;
  std::set<Key, KeyLess> ref;
  std::int64_t next_priority = 1'000'000;
  std::vector<Key> present;
  for (int round = 0; round < 20'000; ++round) {
    const auto r = rng() % 100;
    const std::int64_t price = 2'000'000 + tick * static_cast<std::int64_t>(rng() % prices) + (r == 1 ? tick / 2 : 0);
    if (r < 50 || present.empty()) {
      // Mostly the latest priority (appended to its price's last sublevel), sometimes an earlier one
      // (inside a level, which may split), sometimes a key already present.
      Key k{price, r < 40 ? ++next_priority : static_cast<std::int64_t>(rng() % 1'000'000), 0};
      if (r >= 48 && !present.empty()) k = present[rng() % present.size()];
      const bool added = ref.insert(k).second;
      s.insert(k);
      if (added) present.push_back(k);
    } else if (r < 90) {
      const std::size_t i = rng() % present.size();
      const Key k = present[i];
      present[i] = present.back();
      present.pop_back();
      ref.erase(k);
      s.erase(k);
      s.erase(k);  // erasing an absent key does nothing
    } else if (r < 95) {
      Key k = present[rng() % present.size()];
      k.payload = static_cast<std::int64_t>(rng() % 1000);
      ref.erase(k);
      ref.insert(k);
      s.replace(k);
    } else {
      const Key probe{price, static_cast<std::int64_t>(rng() % (next_priority + 1))};
      const auto want = ref.lower_bound(probe);
      const auto got = s.lower_bound(probe);
      if (want == ref.end()) {
        REQUIRE(got == s.end());
      } else {
        REQUIRE(got != s.end());
        REQUIRE(got->price == want->price);
        REQUIRE(got->priority == want->priority);
      }
      REQUIRE(s.count(probe) == ref.count(probe));
    }
    if (round % 997 == 0) check_same(s, ref);
  }
  check_same(s, ref);
  // Drain, checking on the way.
  while (!present.empty()) {
    const Key k = present.back();
    present.pop_back();
    ref.erase(k);
    s.erase(k);
    if (present.size() % 301 == 0) check_same(s, ref);
  }
  REQUIRE(s.empty());
  REQUIRE(s.begin() == s.end());
}

TEST_CASE("LevelSet: a price of many keys appended and erased from the front", "[level_set]") {
  Set s;
  std::set<Key, KeyLess> ref;
  for (std::int64_t p = 0; p < 1000; ++p) {
    const Key k{7, p, 0};
    s.insert(k);
    ref.insert(k);
  }
  check_same(s, ref);
  for (std::int64_t p = 0; p < 1000; p += 2) {
    s.erase(Key{7, p, 0});
    ref.erase(Key{7, p, 0});
  }
  check_same(s, ref);
  const auto it = s.lower_bound(Key{7, 500, 0});
  REQUIRE(it != s.end());
  REQUIRE(it->priority == 501);
  REQUIRE(s.lower_bound(Key{7, 1000, 0}) == s.end());
  REQUIRE(s.lower_bound(Key{8, 0, 0})->priority == 1);  // a higher price sorts first: before every key of 7
}
