// The allocator's size classes, for containers that grow into the whole of the block they are given.
#pragma once

#include <bit>
#include <cstddef>

namespace gpuex::matching {

// The bytes jemalloc (gpuexd's and the bench's allocator) gives a request of `bytes`: multiples of 16 up to 128,
// then four classes a doubling (160, 192, 224, 256, 320, ...). glibc's malloc rounds to 16 bytes, so room sized
// by this wastes no more there than its own rounding would.
constexpr std::size_t size_class(std::size_t bytes) {
  const std::size_t step = bytes > 128 ? std::bit_floor(bytes - 1) / 4 : 16;  // bytes in (2^j, 2^(j+1)]: 2^(j-2)
  return (bytes + step - 1) / step * step;
}

// Room for `want` items of `item` bytes at least: as many as fit in the size class of their bytes.
constexpr std::size_t room_in_class(std::size_t want, std::size_t item) { return size_class(want * item) / item; }

static_assert(size_class(40) == 48 && size_class(160) == 160 && size_class(2600) == 3072 && size_class(2560) == 2560);

}  // namespace gpuex::matching
