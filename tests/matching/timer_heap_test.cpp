// TimerHeap against a heap of whole Timers: the same timers come out in the same (at, kind, id) order, those
// packed in words (orders' and leases' at times in [0, 2^32) with ids below 2^31) and those kept whole (pools',
// negative or later times, larger ids) mixed, equal timers included.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "matching/timer_heap.hpp"

using namespace gpuex::matching;

TEST_CASE("TimerHeap pops timers in (at, kind, id) order, packed or whole", "[timer_heap]") {
  std::mt19937_64 rng(23);
  const std::vector<std::int64_t> edge_times = {-1, 0, 1, (std::int64_t{1} << 32) - 1, std::int64_t{1} << 32,
                                                std::int64_t{1} << 40};
  const std::vector<std::int64_t> edge_ids = {0, 1, (std::int64_t{1} << 31) - 1, std::int64_t{1} << 31,
                                              (std::int64_t{1} << 62) - 1};
  auto pick = [&](const std::vector<std::int64_t>& edges, std::int64_t near) {
    if (rng() % 4 == 0) return edges[rng() % edges.size()];
    return near + static_cast<std::int64_t>(rng() % 8);  // close values: ties and near-ties
  };
  TimerHeap heap;
  std::vector<Timer> ref;  // a min-heap of whole Timers
  for (int round = 0; round < 20'000; ++round) {
    if (rng() % 3 != 0 || ref.empty()) {
      const Timer t(Seconds(pick(edge_times, 1'800'000'000)), static_cast<TimerKind>(rng() % 3), pick(edge_ids, 1000));
      heap.push(t.at, t.kind(), t.id());
      ref.push_back(t);
      std::push_heap(ref.begin(), ref.end(), std::greater<>{});
    } else {
      const Seconds now(pick(edge_times, 1'800'000'000));
      REQUIRE(heap.due(now) == (ref.front().at <= now));
      std::pop_heap(ref.begin(), ref.end(), std::greater<>{});
      const Timer want = ref.back();
      ref.pop_back();
      const Timer got = heap.pop();
      REQUIRE(got == want);
    }
    REQUIRE(heap.size() == ref.size());
    REQUIRE(heap.empty() == ref.empty());
  }
  while (!ref.empty()) {
    std::pop_heap(ref.begin(), ref.end(), std::greater<>{});
    REQUIRE(heap.pop() == ref.back());
    ref.pop_back();
  }
  REQUIRE(heap.empty());
}
