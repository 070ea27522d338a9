// jemalloc reads `malloc_conf` when it starts. thp:always puts its heap in transparent huge pages (2 MiB)
// where the kernel allows them (THP "madvise" or "always"): the book grows by ~670 bytes per resting
// order, which on 4 KiB pages is a page fault every ~6 orders at ~10 µs each on this VM, most of the
// engine's slowest 1 % (bench/README.md "matching", session 8). metadata_thp does the same for
// jemalloc's own metadata. The cost is resident memory: ~11-18 % more at the bench's peak.
#include <jemalloc/jemalloc.h>

const char* malloc_conf = "thp:always,metadata_thp:always";
