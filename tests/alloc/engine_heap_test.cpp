// The engine's heap (alloc/engine_heap.hpp): where a bound thread's memory comes from, and that memory faulted in
// ahead (or freed into the arena) is filled without page faults, while fresh memory is not.
#include <catch2/catch.hpp>
#include <jemalloc/jemalloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "alloc/engine_heap.hpp"

using gpuex::alloc::EngineHeap;
using gpuex::alloc::HeapBinding;

namespace {

unsigned arena_of(void* p) {
  unsigned arena = 0;
  std::size_t size = sizeof arena;
  REQUIRE(mallctl("arenas.lookup", &arena, &size, &p, sizeof p) == 0);
  return arena;
}

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Page faults of this thread while it fills `bytes` with 512-byte objects from `heap` (each written to), as a
// growing book does. The pointers are kept in memory allocated before, outside the count.
long faults_filling(const EngineHeap& heap, std::size_t bytes) {
  constexpr std::size_t kObject = 512;
  std::vector<void*> objects(bytes / kObject);
  long faults = 0;
  {
    const HeapBinding bound(&heap);
    const long before = minor_faults();
    for (auto& p : objects) {
      p = std::malloc(kObject);
      if (p != nullptr) static_cast<volatile char*>(p)[0] = 1;
    }
    faults = minor_faults() - before;
  }
  REQUIRE(std::find(objects.begin(), objects.end(), nullptr) == objects.end());
  for (void* p : objects) std::free(p);
  return faults;
}

}  // namespace

TEST_CASE("a thread bound to the engine heap allocates from its arena, and from its own again once unbound") {
  const EngineHeap heap(0);
  void* mine = std::malloc(100);
  CHECK(arena_of(mine) != heap.arena());
  {
    const HeapBinding bound(&heap);
    void* small = std::malloc(100);
    std::vector<char> large(1 << 20);
    CHECK(arena_of(small) == heap.arena());
    CHECK(arena_of(large.data()) == heap.arena());
    {
      const HeapBinding nothing(nullptr);  // a null heap changes nothing
      void* still = std::malloc(100);
      CHECK(arena_of(still) == heap.arena());
      std::free(still);
    }
    std::free(mine);  // memory from another arena may be freed while bound
    mine = small;
  }
  void* after = std::malloc(100);
  CHECK(arena_of(after) != heap.arena());
  std::free(after);
  std::free(mine);  // and memory of the engine heap freed by an unbound thread
}

TEST_CASE("the engine heap's reserve is faulted in ahead, and what it frees stays faulted in") {
  constexpr std::size_t kFill = std::size_t{32} << 20;
  const EngineHeap reserved(std::size_t{48} << 20);
  const EngineHeap fresh(0);
  CHECK(reserved.reserve_bytes() == (std::size_t{48} << 20));
  CHECK(fresh.reserve_bytes() == 0);

  const long cold = faults_filling(fresh, kFill);
  const long warm = faults_filling(reserved, kFill);
  const long again = faults_filling(fresh, kFill);  // what the first fill freed, kept by the arena
  INFO("page faults filling 32 MiB: fresh " << cold << ", reserved " << warm << ", fresh again " << again);
  // Fresh memory faults at least once per 2 MiB (huge pages) and up to once per 4 KiB page; memory faulted in
  // before only where jemalloc's own metadata grows.
  CHECK(cold >= 16);
  CHECK(warm * 8 <= cold);
  CHECK(again * 8 <= cold);
}

TEST_CASE("an engine heap's reserve is rounded up to whole 2 MiB blocks") {
  CHECK(EngineHeap(1).reserve_bytes() == (std::size_t{2} << 20));
  CHECK(EngineHeap((std::size_t{2} << 20) + 1).reserve_bytes() == (std::size_t{4} << 20));
  CHECK(EngineHeap(0).describe().rfind("0 MiB faulted in ahead", 0) == 0);
}
