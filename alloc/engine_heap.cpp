#include "alloc/engine_heap.hpp"

#include <jemalloc/jemalloc.h>
#include <sys/types.h>

#include <stdexcept>
#include <vector>

namespace gpuex::alloc {

namespace {

void ctl(const std::string& name, void* old_value, std::size_t* old_size, void* new_value, std::size_t new_size) {
  if (int err = mallctl(name.c_str(), old_value, old_size, new_value, new_size); err != 0) {
    throw std::runtime_error("jemalloc: mallctl(" + name + ") failed with error " + std::to_string(err));
  }
}

// Blocks under jemalloc's oversize threshold (8 MiB), so they are ordinary extents of the arena, split later for
// whatever the engine asks (alloc/jemalloc_conf.cpp lets any free extent be split for a small request).
constexpr std::size_t kBlock = std::size_t{2} << 20;
constexpr std::size_t kPage = 4096;

// The thread's cache keeps the objects it holds when the thread changes arenas: emptied, so that what the thread
// allocates next comes from the arena it is bound to.
void flush_thread_cache() { mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0); }

}  // namespace

EngineHeap::EngineHeap(std::size_t reserve_bytes) {
  const auto started = std::chrono::steady_clock::now();
  std::size_t size = sizeof arena_;
  ctl("arenas.create", &arena_, &size, nullptr, 0);
  const std::string arena = "arena." + std::to_string(arena_) + ".";
  ssize_t never = -1;
  ctl(arena + "dirty_decay_ms", nullptr, nullptr, &never, sizeof never);
  ctl(arena + "muzzy_decay_ms", nullptr, nullptr, &never, sizeof never);
  const int flags = MALLOCX_ARENA(arena_) | MALLOCX_TCACHE_NONE;
  std::vector<void*> blocks;
  blocks.reserve((reserve_bytes + kBlock - 1) / kBlock);
  for (std::size_t made = 0; made < reserve_bytes; made += kBlock) {
    auto* block = static_cast<volatile char*>(mallocx(kBlock, flags));
    if (block == nullptr) {
      for (void* b : blocks) dallocx(b, flags);
      throw std::runtime_error("jemalloc: out of memory faulting in " + std::to_string(reserve_bytes >> 20) +
                               " MiB for the engine's heap");
    }
    for (std::size_t at = 0; at < kBlock; at += kPage) block[at] = 0;  // the fault, now rather than in a command
    blocks.push_back(const_cast<char*>(block));
  }
  for (void* b : blocks) dallocx(b, flags);  // kept by the arena (no decay), faulted in
  reserve_ = blocks.size() * kBlock;
  took_ = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
}

std::string EngineHeap::describe() const {
  return std::to_string(reserve_ >> 20) + " MiB faulted in ahead in " + std::to_string(took_.count()) +
         " ms (jemalloc arena " + std::to_string(arena_) + ", freed pages kept)";
}

HeapBinding::HeapBinding(const EngineHeap* heap) {
  if (heap == nullptr) return;
  unsigned arena = heap->arena();
  std::size_t size = sizeof previous_;
  ctl("thread.arena", &previous_, &size, &arena, sizeof arena);
  flush_thread_cache();
  bound_ = true;
}

HeapBinding::~HeapBinding() {
  if (!bound_) return;
  // Cannot fail for an arena that existed when this binding was made; a destructor must not throw anyway.
  mallctl("thread.arena", nullptr, nullptr, &previous_, sizeof previous_);
  flush_thread_cache();
}

}  // namespace gpuex::alloc
