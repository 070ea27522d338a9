// SHA-256 (OpenSSL) and the hex forms the project stores it in.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace gpuex {

using Sha256 = std::array<unsigned char, 32>;

Sha256 sha256(std::string_view data);
std::string to_hex(const unsigned char* data, std::size_t size);
inline std::string sha256_hex(std::string_view data) {
  auto d = sha256(data);
  return to_hex(d.data(), d.size());
}
// A bytea parameter in text form: "\x" followed by hex.
inline std::string sha256_bytea(std::string_view data) { return "\\x" + sha256_hex(data); }

}  // namespace gpuex
