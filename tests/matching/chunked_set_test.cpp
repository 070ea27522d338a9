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
      const bool inserted = s.insert(k);
      const bool fresh = ref.insert(k).second;
      REQUIRE(inserted == fresh);
      REQUIRE(s.size() == before + (fresh ? 1 : 0));
      if (fresh) in.push_back(k);
    } else {
      const std::size_t at = rng() % in.size();
      const Key k = in[at];
      in[at] = in.back();
      in.pop_back();
      REQUIRE(s.erase(k));
      ref.erase(k);
      REQUIRE(s.count(k) == 0);
      REQUIRE_FALSE(s.erase(k));
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

// A set of one chunk keeps it inline and a set of more an array of chunks (chunked_set.hpp): each change that
// moves a set from one form to the other, and every operation in both.
TEST_CASE("chunked set: one chunk to two and back, emptied, replaced", "[chunked_set]") {
  SmallSet s;
  std::set<Key, KeyLess> ref;
  const auto add = [&](std::int64_t priority) {
    s.insert(Key{0, priority});
    ref.insert(Key{0, priority});
  };
  const auto remove = [&](std::int64_t priority) {
    s.erase(Key{0, priority});
    ref.erase(Key{0, priority});
  };
  REQUIRE(s.chunks().empty());
  REQUIRE(s.begin() == s.end());
  REQUIRE(s.lower_bound(Key{0, 1}) == s.end());
  REQUIRE_FALSE(s.replace(Key{0, 1}, Key{0, 1}));
  REQUIRE_FALSE(s.erase(Key{0, 1}));  // erasing from an empty set changes nothing
  check_same(s, ref);

  // One chunk: lookups, a replace, a duplicate insert, an erase that leaves keys.
  add(10);
  add(30);
  add(20);
  add(20);
  REQUIRE(s.chunks().size() == 1);
  check_same(s, ref);
  REQUIRE(s.lower_bound(Key{0, 15})->priority == 20);
  REQUIRE(s.lower_bound(Key{0, 31}) == s.end());
  REQUIRE(s.count(Key{0, 30}) == 1);
  REQUIRE(s.replace(Key{0, 20}, Key{0, 21, {5}}));
  ref.erase(Key{0, 20});
  ref.insert(Key{0, 21});
  REQUIRE(s.lower_bound(Key{0, 21})->payload[0] == 5);
  remove(10);
  REQUIRE(s.chunks().size() == 1);
  check_same(s, ref);
  // Erased to empty, then one chunk again.
  remove(21);
  remove(30);
  REQUIRE(s.chunks().empty());
  check_same(s, ref);
  add(40);
  REQUIRE(s.chunks().size() == 1);
  check_same(s, ref);

  // A fourth key splits the chunk in two: the chunks' array.
  add(50);
  add(60);
  add(45);
  REQUIRE(s.chunks().size() == 2);
  check_same(s, ref);
  const Key first_of_second = s.chunks()[1].front();
  REQUIRE(s.replace(first_of_second, Key{0, first_of_second.priority + 1, {7}}));
  ref.erase(first_of_second);
  ref.insert(Key{0, first_of_second.priority + 1});
  REQUIRE(s.lower_bound(Key{0, first_of_second.priority})->payload[0] == 7);
  check_same(s, ref);
  // Erases that empty the first chunk: back to one chunk inline.
  const std::vector<Key> first = s.chunks()[0];
  for (const Key& k : first) remove(k.priority);
  REQUIRE(s.chunks().size() == 1);
  check_same(s, ref);
  for (std::int64_t p = 100; p < 110; ++p) add(p);
  REQUIRE(s.chunks().size() > 2);
  check_same(s, ref);
  // Erased to empty from many chunks, then one chunk again.
  const std::set<Key, KeyLess> all = ref;
  for (const Key& k : all) remove(k.priority);
  REQUIRE(s.chunks().empty());
  check_same(s, ref);
  add(1);
  REQUIRE(s.chunks().size() == 1);
  check_same(s, ref);
}

TEST_CASE("chunked set: two chunks merge back into one", "[chunked_set]") {
  ChunkedSet<Key, KeyLess, 7> s;  // a chunk of 8 splits into 4 and 4; two of at most 3 merge
  std::set<Key, KeyLess> ref;
  for (std::int64_t p = 0; p < 8; ++p) {
    s.insert(Key{0, p});
    ref.insert(Key{0, p});
  }
  REQUIRE(s.chunks().size() == 2);
  // Erases until the first chunk and the second hold 3 keys between them (an erase in the first): they merge,
  // inline.
  for (std::int64_t p : {4, 5, 0, 1, 2}) {
    s.erase(Key{0, p});
    ref.erase(Key{0, p});
    check_same(s, ref);
  }
  REQUIRE(s.chunks().size() == 1);
  REQUIRE(s.lower_bound(Key{0, 4})->priority == 6);
  // And split again.
  for (std::int64_t p = 10; p < 16; ++p) {
    s.insert(Key{0, p});
    ref.insert(Key{0, p});
  }
  REQUIRE(s.chunks().size() == 2);
  check_same(s, ref);
}

// A set of one chunk points at its own member (chunked_set.hpp): moved, it must point at the new one's.
TEST_CASE("chunked set: moved with one chunk, with many and empty", "[chunked_set]") {
  std::set<Key, KeyLess> one_ref;
  std::set<Key, KeyLess> many_ref;
  SmallSet one;
  SmallSet many;
  for (std::int64_t p = 0; p < 2; ++p) {
    one.insert(Key{0, p});
    one_ref.insert(Key{0, p});
  }
  for (std::int64_t p = 0; p < 9; ++p) {
    many.insert(Key{1, p});
    many_ref.insert(Key{1, p});
  }
  REQUIRE(one.chunks().size() == 1);
  REQUIRE(many.chunks().size() > 1);
  std::vector<SmallSet> sets;
  sets.push_back(std::move(one));
  sets.push_back(std::move(many));
  sets.emplace_back();
  sets.reserve(100);  // moves them again
  check_same(sets[0], one_ref);
  check_same(sets[1], many_ref);
  check_same(sets[2], {});
  check_same(one, {});
  check_same(many, {});
  // Assigned over a set of either form, and the moved-from sets used again.
  sets[0] = std::move(sets[1]);
  check_same(sets[0], many_ref);
  check_same(sets[1], {});
  sets[2] = std::move(sets[0]);
  check_same(sets[2], many_ref);
  one.insert(Key{0, 7});
  sets[2] = std::move(one);
  check_same(sets[2], std::set<Key, KeyLess>{Key{0, 7}});
  REQUIRE(sets[2].insert(Key{0, 8}));
  REQUIRE(sets[2].lower_bound(Key{0, 8})->priority == 8);
}
