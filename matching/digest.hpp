// A small, stable 64-bit FNV-1a hasher for state digests and idempotency body hashes.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpuex::matching {

class Fnv1a {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  // Integers are hashed as 8 little-endian bytes, so the digest does not depend on the host's types.
  void i64(std::int64_t v) {
    unsigned char b[8];
    const auto u = static_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(u >> (8 * i));
    bytes(b, 8);
  }
  void str(std::string_view s) {
    i64(static_cast<std::int64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_{0xcbf29ce484222325ULL};
};

}  // namespace gpuex::matching
