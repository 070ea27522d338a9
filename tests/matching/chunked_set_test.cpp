// ChunkedSet (the fixed-window bid and free-run indexes' cells, a pool's spot leases) against std::set: the
// same keys in the same order through random inserts and erases, chunks non-empty, sorted, ordered one after
// the other, never over kMax keys (a chunk above it splits) and never with room for more than kMax + 1.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <vector>

#include "matching/chunked_set.hpp"

using namespace gpuex::matching;

namespace {

// 40 bytes, as the indexes' entries.
struct Key {
  std::int64_t price;
  std::int64_t priority;
  std::int64_t payload[3]{};
};

struct KeyLess {
  bool operator()(const Key& a, const Key& b) const {
    if (a.price != b.price) return a.price > b.price;
    return a.priority < b.priority;
  }
};

using Set = ChunkedSet<Key, KeyLess>;
using SmallSet = ChunkedSet<Key, KeyLess, 3>;  // chunks of at most 3 keys, as a set may choose (MaxKeys)

template <class S>
void check_same(const S& s, const std::set<Key, KeyLess>& ref) {
  REQUIRE(s.size() == ref.size());
  REQUIRE(s.empty() == ref.empty());
  std::vector<Key> seen;
  for (const std::vector<Key>& chunk : s.chunks()) {
    REQUIRE(!chunk.empty());
    REQUIRE(chunk.size() <= S::kMax);
    REQUIRE(chunk.capacity() <= S::kMax + 1);
    seen.insert(seen.end(), chunk.begin(), chunk.end());
  }
  REQUIRE(seen.size() == ref.size());
  auto r = ref.begin();
  for (const Key& k : seen) {
    REQUIRE(k.price == r->price);
    REQUIRE(k.priority == r->priority);
    ++r;
  }
  // The iterator walks the same keys.
  std::size_t n = 0;
  for (auto it = s.begin(); it != s.end(); ++it) ++n;
  REQUIRE(n == ref.size());
}

template <class S = Set>
void run(std::uint64_t seed, int prices, int steps) {
  std::mt19937_64 rng(seed);
  S s;
  std::set<Key, KeyLess> ref;
  std::int64_t next_priority = 1;
  std::vector<Key> in;
  for (int i = 0; i < steps; ++i) {
    const bool add = in.empty() || rng() % 100 < 60;
    if (add) {
      // Mostly new priorities at the end (as orders arrive), some anywhere.
      const std::int64_t priority = rng() % 4 == 0 ? static_cast<std::int64_t>(rng() % 100'000) : next_priority++;
      const Key k{static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(prices)), priority};
      const std::size_t before = s.size();
      s.insert(k);
      const bool fresh = ref.insert(k).second;
      REQUIRE(s.size() == before + (fresh ? 1 : 0));
      if (fresh) in.push_back(k);
    } else {
      const std::size_t at = rng() % in.size();
      const Key k = in[at];
      in[at] = in.back();
      in.pop_back();
      s.erase(k);
      ref.erase(k);
      REQUIRE(s.count(k) == 0);
    }
    if (i % 97 == 0) check_same(s, ref);
  }
  check_same(s, ref);
  // lower_bound agrees with the reference for keys in and not in the set.
  for (int i = 0; i < 500; ++i) {
    const Key k{static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(prices + 2)) - 1,
                static_cast<std::int64_t>(rng() % 100'000)};
    const auto it = s.lower_bound(k);
    const auto r = ref.lower_bound(k);
    REQUIRE((it == s.end()) == (r == ref.end()));
    if (r != ref.end()) {
      REQUIRE(it->price == r->price);
      REQUIRE(it->priority == r->priority);
    }
  }
  // Emptied key by key.
  for (const Key& k : in) {
    s.erase(k);
    ref.erase(k);
  }
  check_same(s, ref);
}

}  // namespace

TEST_CASE("chunked set: few keys, as most index cells", "[chunked_set]") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) run(seed, 5, 40);
}

TEST_CASE("chunked set: many keys in many chunks", "[chunked_set]") {
  run(7, 50, 20'000);
  run(8, 1'000'000, 20'000);
}

TEST_CASE("chunked set: small chunks split and merge in order", "[chunked_set]") {
  run<SmallSet>(9, 50, 5'000);
  run<SmallSet>(10, 1'000'000, 5'000);
}

TEST_CASE("chunked set: replace overwrites a key in its place, across chunk ends", "[chunked_set]") {
  SmallSet s;
  std::set<Key, KeyLess> ref;
  for (std::int64_t i = 0; i < 20; ++i) {
    const Key k{0, 10 * i};
    s.insert(k);
    ref.insert(k);
  }
  REQUIRE(s.chunks().size() > 3);
  // The last key of the first chunk and the first key of the second, each by a key that sorts where it did
  // (another priority between its neighbours') and carries another payload.
  const Key last_of_first = s.chunks()[0].back();
  const Key first_of_second = s.chunks()[1].front();
  const Key moved_last{0, last_of_first.priority + 1, {1, 2, 3}};
  const Key moved_first{0, first_of_second.priority - 1, {4, 5, 6}};
  const std::uint64_t version = s.version();
  REQUIRE(s.replace(last_of_first, moved_last));
  REQUIRE(s.replace(first_of_second, moved_first));
  REQUIRE(s.version() != version);
  ref.erase(last_of_first);
  ref.erase(first_of_second);
  ref.insert(moved_last);
  ref.insert(moved_first);
  check_same(s, ref);
  REQUIRE(s.count(last_of_first) == 0);
  REQUIRE(s.lower_bound(moved_last)->payload[2] == 3);
  REQUIRE(s.lower_bound(moved_first)->payload[2] == 6);
  // The one-key form keeps the order fields and takes the rest.
  s.replace(Key{0, 50, {7, 8, 9}});
  REQUIRE(s.lower_bound(Key{0, 50})->payload[0] == 7);
  // A key not in the set: nothing changes.
  REQUIRE_FALSE(s.replace(Key{0, 55}, Key{0, 56}));
  check_same(s, ref);
}

TEST_CASE("chunked set: keys in order fill chunks that split", "[chunked_set]") {
  Set s;
  std::set<Key, KeyLess> ref;
  for (std::int64_t i = 0; i < 1'000; ++i) {
    const Key k{0, i};
    s.insert(k);
    ref.insert(k);
  }
  check_same(s, ref);
  // Keys in order only ever go to the last chunk: each split leaves a chunk of (kMax + 1) / 2 behind.
  REQUIRE(s.chunks().size() >= 1'000 / ((Set::kMax + 1) / 2));
  for (std::int64_t i = 0; i < 1'000; i += 2) {
    s.erase(Key{0, i});
    ref.erase(Key{0, i});
  }
  check_same(s, ref);
}
