// Decimal strings on the wire <-> integer micro-dollars: exact both ways, hostile input refused.
#include <catch2/catch.hpp>

#include <limits>

#include "server/decimal.hpp"

using gpuex::format_fixed;
using gpuex::format_price;
using gpuex::format_usd;
using gpuex::parse_fixed;

TEST_CASE("prices parse exactly into micro-dollars") {
  CHECK(parse_fixed("2.0500", 6) == 2'050'000);
  CHECK(parse_fixed("2.05", 6) == 2'050'000);
  CHECK(parse_fixed("0.0001", 6) == 100);
  CHECK(parse_fixed("12", 6) == 12'000'000);
  CHECK(parse_fixed("-0.5", 6) == -500'000);
  CHECK(parse_fixed("0.123456", 6) == 123'456);
  // Zeros past the scale carry no value, so they are not an error.
  CHECK(parse_fixed("1.2300000000", 6) == 1'230'000);
}

TEST_CASE("malformed decimals are refused, not guessed") {
  for (const char* bad : {"", "-", ".5", "1.", "1e3", "+1", "1,5", " 1", "1 ", "0x10", "1.2.3",
                          "--1", "NaN", "inf", "1.0000001", "١"}) {
    INFO(bad);
    CHECK_FALSE(parse_fixed(bad, 6).has_value());
  }
}

TEST_CASE("decimals that overflow int64 are refused") {
  CHECK(parse_fixed("9223372036854.775807", 6) == std::numeric_limits<std::int64_t>::max());
  CHECK(parse_fixed("-9223372036854.775808", 6) == std::numeric_limits<std::int64_t>::min());
  CHECK_FALSE(parse_fixed("9223372036854.775808", 6).has_value());
  CHECK_FALSE(parse_fixed("99999999999999999999", 6).has_value());
  CHECK_FALSE(parse_fixed(std::string(100, '9'), 0).has_value());
}

TEST_CASE("formatting keeps the wire's decimals") {
  CHECK(format_price(2'050'000) == "2.0500");
  CHECK(format_price(100) == "0.0001");
  CHECK(format_price(123'456) == "0.123456");  // off the default tick: no digit is hidden
  CHECK(format_usd(1'500'000) == "1.500000");
  CHECK(format_usd(-1) == "-0.000001");
  CHECK(format_fixed(std::numeric_limits<std::int64_t>::min(), 6, 6) == "-9223372036854.775808");
  CHECK(format_fixed(7, 0, 0) == "7");
}

TEST_CASE("format and parse round-trip") {
  for (std::int64_t v : {0LL, 1LL, 99LL, 100LL, 1'000'000LL, 123'456'789LL, -42LL}) {
    CHECK(parse_fixed(format_price(v), 6) == v);
  }
}
