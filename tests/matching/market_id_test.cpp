// MarketId: an interned name that compares and orders exactly as the std::string it replaced (maps and sets
// keyed by market, and every sorted output, keep their order), refuses a name longer than a market's, and is
// found without entering the table for names from clients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "matching/types.hpp"

using namespace gpuex::matching;
using namespace std::string_literals;

TEST_CASE("a market id orders and compares as its name", "[market_id]") {
  // Prefixes, bytes past 0x7f (std::string orders them as unsigned), an embedded NUL, the empty name.
  const std::vector<std::string> names{"",      "A",        "A100",       "A100-PCIE-40G", "H100", "H100\0"s,
                                       "H100-", "\xc3\xa9", "L40S-48G",   "a",             "\x7f", "\x80"};
  for (const std::string& a : names) {
    for (const std::string& b : names) {
      INFO(a << " vs " << b);
      CHECK((MarketId{a} == MarketId{b}) == (a == b));
      CHECK((MarketId{a} < MarketId{b}) == (a < b));
      CHECK((MarketId{a} <=> MarketId{b}) == (a <=> b));
    }
  }
  CHECK(MarketId{"H100-SXM-80G"}.value() == "H100-SXM-80G");
  CHECK(MarketId{}.empty());
  CHECK(MarketId{} == MarketId{""});
}

TEST_CASE("a market id holds 40 bytes and refuses a longer name", "[market_id]") {
  const std::string longest(MarketId::kMaxSize, 'X');
  CHECK(MarketId{longest}.value() == longest);
  CHECK_THROWS_AS(MarketId{longest + "X"}, std::length_error);
}

TEST_CASE("a name from a client finds a market id only if the process named it", "[market_id]") {
  CHECK_FALSE(MarketId::existing("market-id-test-unnamed").has_value());
  CHECK_FALSE(MarketId::existing("market-id-test-unnamed").has_value());  // the lookup did not enter it
  const MarketId named{"market-id-test-named"};
  REQUIRE(MarketId::existing("market-id-test-named").has_value());
  CHECK(*MarketId::existing("market-id-test-named") == named);
  CHECK(MarketId::existing("") == MarketId{});
}
