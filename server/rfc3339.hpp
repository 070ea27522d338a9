// RFC 3339 UTC times on the wire <-> Unix seconds inside.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpuex {

// "2027-01-01T00:00:00Z" or with an offset ("...+02:00"); a fraction is accepted only if it is zero.
// Years 1970..9999. nullopt on anything else (including impossible dates such as 02-30).
std::optional<std::int64_t> parse_rfc3339(std::string_view text);

// Unix seconds -> "2027-01-01T00:00:00Z".
std::string format_rfc3339(std::int64_t unix_seconds);

}  // namespace gpuex
