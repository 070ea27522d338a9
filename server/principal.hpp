// Who is asking: the account behind an API key, and the key's scopes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpuex {

// Scopes are independent: admin does not imply the others (API.md "Auth").
enum class Scope : std::uint8_t { read = 1, trade = 2, provide = 4, admin = 8 };
using Scopes = std::uint8_t;

// "read,trade" -> bits; nullopt on an unknown or empty scope list.
std::optional<Scopes> parse_scopes(std::string_view comma_separated);
std::string scopes_to_string(Scopes scopes);  // "read,trade"
inline bool has_scope(Scopes scopes, Scope s) { return (scopes & static_cast<Scopes>(s)) != 0; }
inline Scopes operator|(Scope a, Scope b) { return static_cast<Scopes>(static_cast<Scopes>(a) | static_cast<Scopes>(b)); }

struct Principal {
  std::int64_t account_id = 0;
  std::string key_id;
  Scopes scopes = 0;
};

}  // namespace gpuex
