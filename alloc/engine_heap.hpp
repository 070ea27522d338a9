// The engine's heap: a jemalloc arena of its own, faulted in ahead of use, that keeps the pages freed into it.
//
// The book grows by a few hundred bytes per resting order. Fresh memory costs the thread that first touches it
// a page fault (with huge pages the kernel zeroes 2 MiB at a time: up to ~5 ms on this VM), inside whatever
// command happened to grow the book. An exchange should not pay that while it trades: EngineHeap faults its
// reserve in once, when gpuexd starts, and its arena never returns freed pages to the OS, so a book that
// shrinks and grows again does not fault either. Beyond the reserve the engine faults memory in as before.
// The cost is resident memory: the reserve, or the book's peak if higher, stays the process's.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace gpuex::alloc {

// gpuexd's default (--engine-heap-mib), and bench_matching's: a book of ~500,000 resting orders.
inline constexpr std::size_t kDefaultEngineHeapMiB = 256;

class EngineHeap {
 public:
  // Creates the arena and faults in `reserve_bytes` of it, rounded up to whole 2 MiB blocks (0: an arena without
  // a reserve). Throws std::runtime_error if jemalloc refuses (out of memory, or not the allocator linked in).
  explicit EngineHeap(std::size_t reserve_bytes);

  unsigned arena() const { return arena_; }
  std::size_t reserve_bytes() const { return reserve_; }
  std::string describe() const;  // for logs: "256 MiB faulted in ahead in 41 ms (jemalloc arena 9, ...)"

 private:
  unsigned arena_ = 0;
  std::size_t reserve_ = 0;
  std::chrono::milliseconds took_{0};
};

// While a HeapBinding lives, the thread that made it allocates from `heap` (null: changes nothing). Memory goes
// back to the arena it came from, whichever thread frees it; small objects the bound thread frees pass through its
// cache first and may serve its next allocations of their size, whichever arena they came from.
class HeapBinding {
 public:
  explicit HeapBinding(const EngineHeap* heap);
  ~HeapBinding();
  HeapBinding(const HeapBinding&) = delete;
  HeapBinding& operator=(const HeapBinding&) = delete;

 private:
  bool bound_ = false;
  unsigned previous_ = 0;
};

}  // namespace gpuex::alloc
