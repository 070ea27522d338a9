// MarketId: an inline name that compares and orders exactly as the std::string it replaced (maps and sets
// keyed by market, and every sorted output, keep their order), and refuses a name it cannot hold.
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
