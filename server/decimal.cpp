// See decimal.hpp.
#include "server/decimal.hpp"

#include <limits>

namespace gpuex {

std::optional<std::int64_t> parse_fixed(std::string_view text, int scale) {
  if (scale < 0 || scale > 18 || text.empty() || text.size() > 64) return std::nullopt;
  bool negative = false;
  if (text.front() == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  if (whole.empty() || (dot != std::string_view::npos && frac.empty())) return std::nullopt;
  auto is_digits = [](std::string_view s) {
    for (char c : s) {
      if (c < '0' || c > '9') return false;
    }
    return true;
  };
  if (!is_digits(whole) || !is_digits(frac)) return std::nullopt;
  while (static_cast<int>(frac.size()) > scale && frac.back() == '0') frac.remove_suffix(1);
  if (static_cast<int>(frac.size()) > scale) return std::nullopt;

  // Accumulate as a negative number so that INT64_MIN itself can be parsed.
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  std::int64_t acc = 0;
  auto push = [&](int digit) {
    if (acc < (kMin + digit) / 10) return false;
    acc = acc * 10 - digit;
    return true;
  };
  for (char c : whole) {
    if (!push(c - '0')) return std::nullopt;
  }
  for (int i = 0; i < scale; ++i) {
    int digit = i < static_cast<int>(frac.size()) ? frac[static_cast<std::size_t>(i)] - '0' : 0;
    if (!push(digit)) return std::nullopt;
  }
  if (negative) return acc;
  if (acc == kMin) return std::nullopt;
  return -acc;
}

std::string format_fixed(std::int64_t value, int scale, int min_decimals) {
  // Work on the magnitude as unsigned so INT64_MIN formats too.
  bool negative = value < 0;
  std::uint64_t mag = negative ? std::uint64_t(0) - static_cast<std::uint64_t>(value)
                               : static_cast<std::uint64_t>(value);
  std::uint64_t unit = 1;
  for (int i = 0; i < scale; ++i) unit *= 10;
  std::string frac = scale == 0 ? std::string() : std::to_string(mag % unit);
  frac.insert(0, static_cast<std::size_t>(scale) - frac.size(), '0');
  while (static_cast<int>(frac.size()) > min_decimals && frac.back() == '0') frac.pop_back();
  std::string out = negative ? "-" : "";
  out += std::to_string(mag / unit);
  if (!frac.empty()) out += "." + frac;
  return out;
}

}  // namespace gpuex
