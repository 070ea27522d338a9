// Memory for the engine's large arrays that grow with the book (the order slabs, the order id table),
// backed by transparent huge pages where the kernel offers them.
//
// Each 4 KiB page of fresh heap costs a page fault on first touch (~10 us on this VM): while plain's book
// grows to 100,000 resting orders, ~24,000 of them were ~20 % of its time and most of its p99. A block
// from big_alloc() is ordinary malloc memory (so heap statistics such as mallinfo2 count it, and free()
// returns it) on which madvise(MADV_HUGEPAGE) asks for 2 MiB pages: one fault per 2 MiB instead of 512.
// A memory hint only (no I/O): where the kernel has THP off, or on a system without madvise, it is plain
// malloc memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace gpuex::matching {

inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

// malloc(bytes), with the pages of a block of at least kHugePage advised for huge pages. The kernel backs a
// 2 MiB-aligned range with one huge page when all of it is advised (Linux places an anonymous mapping of 2 MiB
// or more, which is how malloc serves such a block, on a 2 MiB boundary where it can).
inline void* big_alloc(std::size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kHugePage) {
    constexpr std::uintptr_t kPage = 4096;
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    // Whole pages around the block: the first and last may hold malloc's header or a neighbour's bytes too
    // (advice only; it never changes their contents).
    const std::uintptr_t from = begin & ~(kPage - 1);
    const std::uintptr_t to = (begin + bytes + kPage - 1) & ~(kPage - 1);
    (void)madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
  }
#endif
  return p;
}

inline void big_free(void* p) { std::free(p); }

// A std::allocator for vectors that may grow past kHugePage (the id table).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(big_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) { big_free(p); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

}  // namespace gpuex::matching
