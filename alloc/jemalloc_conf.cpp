// jemalloc reads `malloc_conf` when it starts. thp:always puts its heap in transparent huge pages (2 MiB)
// where the kernel allows them (THP "madvise" or "always"): the book grows by ~670 bytes per resting
// order, which on 4 KiB pages is a page fault every ~6 orders at ~10 µs each on this VM, most of the
// engine's slowest 1 % (bench/README.md "matching", session 8). metadata_thp does the same for
// jemalloc's own metadata. The cost is resident memory: ~11-18 % more at the bench's peak.
//
// lg_extent_max_active_fit:24 lets jemalloc carve a small request (a 4 KiB slab) out of a free extent of any
// size up to 2^24 times larger. By default it will not split one more than 64 times larger, so the engine's
// reserve (engine_heap.hpp: freed 2 MiB blocks that merge into one extent of hundreds of MiB) would stay
// untouched while the book faulted fresh pages in beside it. Elsewhere the cost is fragmentation: freed
// memory may be reused in pieces rather than kept whole for a large request.
#include <jemalloc/jemalloc.h>

const char* malloc_conf = "thp:always,metadata_thp:always,lg_extent_max_active_fit:24";
