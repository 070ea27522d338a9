// Wire times: RFC 3339 in, Unix seconds inside, and back; impossible dates refused.
#include <catch2/catch.hpp>

#include "server/rfc3339.hpp"

using gpuex::format_rfc3339;
using gpuex::parse_rfc3339;

TEST_CASE("RFC 3339 times parse to Unix seconds") {
  CHECK(parse_rfc3339("1970-01-01T00:00:00Z") == 0);
  CHECK(parse_rfc3339("2027-01-01T00:00:00Z") == 1798761600);
  CHECK(parse_rfc3339("2027-01-01T02:00:00+02:00") == 1798761600);
  CHECK(parse_rfc3339("2026-12-31T19:00:00-05:00") == 1798761600);
  CHECK(parse_rfc3339("2027-01-01T00:00:00.000Z") == 1798761600);
  CHECK(parse_rfc3339("2028-02-29T12:00:00Z") == 1835438400);  // a leap day
}

TEST_CASE("malformed or impossible times are refused") {
  for (const char* bad : {"", "2027-01-01", "2027-01-01 00:00:00Z", "2027-01-01T00:00:00", "2027-13-01T00:00:00Z",
                          "2027-02-29T00:00:00Z", "2027-01-32T00:00:00Z", "2027-01-01T24:00:00Z",
                          "2027-01-01T00:00:00.5Z", "2027-01-01T00:00:00+2:00", "1969-12-31T23:59:59Z",
                          "2027-01-01T00:00:00Zjunk", "99999-01-01T00:00:00Z", "1700000000"}) {
    INFO(bad);
    CHECK_FALSE(parse_rfc3339(bad).has_value());
  }
}

TEST_CASE("Unix seconds format as RFC 3339 UTC and round-trip") {
  CHECK(format_rfc3339(0) == "1970-01-01T00:00:00Z");
  CHECK(format_rfc3339(1798761600) == "2027-01-01T00:00:00Z");
  CHECK(format_rfc3339(1835438400 + 3723) == "2028-02-29T13:02:03Z");
  for (std::int64_t t : {1LL, 86399LL, 951782400LL, 4102444799LL}) CHECK(parse_rfc3339(format_rfc3339(t)) == t);
}
