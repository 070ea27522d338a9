// Exact decimal strings <-> scaled integers (money is integer micro-dollars; no floats on the way).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpuex {

// Parses a plain decimal ("2.05", "-0.5", "12") into value × 10^scale. Rejects exponents, signs other
// than a leading '-', empty parts ("1.", ".5"), more significant decimals than `scale`, and anything
// that does not fit in int64. Trailing zero decimals beyond `scale` are accepted ("1.230000000").
std::optional<std::int64_t> parse_fixed(std::string_view text, int scale);

// Formats value × 10^-scale with at least `min_decimals` and at most `scale` decimals, dropping
// trailing zeros beyond `min_decimals`: format_fixed(20500, 6, 4) == "0.0205".
std::string format_fixed(std::int64_t value, int scale, int min_decimals);

// Prices are micro-dollars per GPU-hour, shown with 4 decimals ("2.0500"); totals in USD, 6 decimals.
inline std::string format_price(std::int64_t micros) { return format_fixed(micros, 6, 4); }
inline std::string format_usd(std::int64_t micros) { return format_fixed(micros, 6, 6); }

}  // namespace gpuex
