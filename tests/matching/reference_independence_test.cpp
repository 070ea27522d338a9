// The reference matcher must not share the engine's logic, or a misreading common to both could never show in
// the differential test: its source is read here and must not include the engine's money, step-function or
// green-policy code, nor call it (reference_rules.hpp holds the reference's own versions).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "reference_rules.hpp"

namespace {

std::string read_source(const std::string& name) {
  const std::string path = std::string(GPUEX_DATA_DIR) + "/../tests/matching/" + name;
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The source without // comments (the reference quotes the rules, and may name what it does not use).
std::string code_of(const std::string& source) {
  std::string out;
  std::istringstream in(source);
  for (std::string line; std::getline(in, line);) out += line.substr(0, line.find("//")) + "\n";
  return out;
}

// What the reference may not use: the engine's includes and functions it once borrowed.
const std::vector<std::pair<std::string, std::string>>& forbidden() {
  static const std::vector<std::pair<std::string, std::string>> f{
      {"matching/money.hpp", R"(#\s*include\s*"matching/money\.hpp")"},
      {"matching/steps.hpp", R"(#\s*include\s*"matching/steps\.hpp")"},
      {"matching/green_policy.hpp", R"(#\s*include\s*"matching/green_policy\.hpp")"},
      {"cost()", R"((^|[^\w:.])(matching::)?cost\s*\()"},
      {"cost_x3600()", R"(\bcost_x3600\s*\()"},
      {"discounted()", R"(\bdiscounted\s*\()"},
      {"div_half_even()", R"(\bdiv_half_even\s*\()"},
      {"GreenPolicy::classify()", R"((\.|->|::)classify\s*\()"},
      {"GreenPolicy::defaults()", R"(\bdefaults\s*\()"},
      {"month_bucket()", R"(\bmonth_bucket\s*\()"},
      {"Pool::verified_at()", R"(\bverified_at\s*\()"},
      {"Pool::gpus()", R"((\.|->)gpus\s*\(\s*\))"},
      {"Steps", R"(\bSteps\b)"},
      {"Step", R"(\bStep\b)"},
      {"Order::free", R"((\.|->)free\b)"},
  };
  return f;
}

std::vector<std::string> violations(const std::string& code) {
  std::vector<std::string> found;
  for (const auto& [name, pattern] : forbidden())
    if (std::regex_search(code, std::regex(pattern))) found.push_back(name);
  return found;
}

}  // namespace

TEST_CASE("the reference matcher uses none of the engine's money, capacity or green code", "[differential][source]") {
  for (const char* file : {"reference_matcher.cpp", "reference_matcher.hpp", "reference_rules.hpp"}) {
    INFO(file);
    CHECK(violations(code_of(read_source(file))).empty());
    for (const std::string& v : violations(code_of(read_source(file)))) WARN(file << " uses " << v);
  }
}

// The check itself can fail: each kind of use is caught in a line written as the old reference had it.
TEST_CASE("the source check catches each borrowed engine function", "[differential][source]") {
  const std::vector<std::pair<std::string, std::string>> samples{
      {"matching/money.hpp", "#include \"matching/money.hpp\"\n"},
      {"cost()", "  l.owed = cost(price, q, e - s);\n"},
      {"cost_x3600()", "  n += cost_x3600(x.request.price, x.remaining, len);\n"},
      {"discounted()", "  const Price eff = discounted(o.request.price, bps, tk);\n"},
      {"GreenPolicy::classify()", "  const GreenTierRule* r = policy_.classify(p.spec.energy);\n"},
      {"month_bucket()", "  return month_bucket(o.window_start);\n"},
      {"Pool::verified_at()", "  if (!p.verified_at(now_)) return 0;\n"},
      {"Pool::gpus()", "  if (x > p.gpus().value) return;\n"},
      {"Order::free", "  a.free.add(s, e, -q.value);\n"},
      {"Steps", "  o.free = Steps();\n"},
  };
  for (const auto& [name, line] : samples) {
    INFO(line);
    const std::vector<std::string> v = violations(code_of(line));
    CHECK(std::find(v.begin(), v.end(), name) != v.end());
  }
  // ... and lets the reference's own names through.
  CHECK(violations(code_of("  l.owed = ref::cost_micros(price, q, e - s);\n"
                           "  reclassify(p, false, out);  // discounted(...) in a comment\n"
                           "  const std::int64_t f = free_of(o.id).min(a, b);\n"))
            .empty());
}

// The reference's own arithmetic, on the worked examples of docs/market-rules.md and DESIGN.md §3-§4 (the oracle
// is only as good as these).
TEST_CASE("the reference's arithmetic gives the rules' worked examples", "[differential][source]") {
  using gpuex::matching::Bucket;
  using gpuex::matching::Price;
  using gpuex::matching::Qty;
  using gpuex::matching::Seconds;
  namespace ref = gpuex::matching::test::ref;
  // "2.0500 x 3 GPUs x 1 s = 0.00170833... USD -> 1,708 µ$. 0.0001 x 1 x 18 s = 0.5 µ$ -> 0 (half to even);
  // x 54 s = 1.5 µ$ -> 2."
  CHECK(ref::cost_micros(Price(2'050'000), Qty(3), Seconds(1)) == 1708);
  CHECK(ref::cost_micros(Price(100), Qty(1), Seconds(18)) == 0);
  CHECK(ref::cost_micros(Price(100), Qty(1), Seconds(54)) == 2);
  CHECK(ref::cost_micros(Price(100), Qty(1), Seconds(90)) == 2);  // 2.5 -> 2
  // "The lease for 8 GPUs x 1 h owes 16.00 USD"; "a firm lease for 10 h ... billed 80.00 USD".
  CHECK(ref::cost_micros(Price(2'000'000), Qty(8), Seconds(3600)) == 16'000'000);
  CHECK(ref::cost_micros(Price(2'000'000), Qty(4), Seconds(10 * 3600)) == 80'000'000);
  // "after 2 h 10 min, 17.333333"
  CHECK(ref::cost_micros(Price(2'000'000), Qty(4), Seconds(2 * 3600 + 600)) == 17'333'333);
  // "a verified green_plus pool lists at 2.0001. Effective: 2.0001 x 0.8 = 1.60008 -> 1.6000"
  CHECK(ref::effective_price(Price(2'000'100), 2000, Price(100)) == Price(1'600'000));
  // "green (15 %): the ask's effective price becomes 1.70"
  CHECK(ref::effective_price(Price(2'000'000), 1500, Price(100)) == Price(1'700'000));
  CHECK(ref::effective_price(Price(2'000'000), 0, Price(100)) == Price(2'000'000));
  CHECK(ref::effective_price(Price(1'999'000), 1500, Price(1000)) == Price(1'699'000));  // 1.69915 -> 1.699
  // "at 2027-01-01 00:00, ... [00:15:01, 01:00) is in 2027-01"; "an ask for March is in 2027-03".
  const std::int64_t jan1 = 1798761600;  // 2027-01-01T00:00:00Z
  CHECK(ref::month_of(Seconds(jan1)) == Bucket{202701});
  CHECK(ref::month_of(Seconds(jan1 - 1)) == Bucket{202612});
  CHECK(ref::month_of(Seconds(jan1 + 31 * 86400 - 1)) == Bucket{202701});
  CHECK(ref::month_of(Seconds(jan1 + 31 * 86400)) == Bucket{202702});
  CHECK(ref::month_of(Seconds(jan1 + (365 + 31 + 28) * 86400)) == Bucket{202802});  // 2028-02-29
  CHECK(ref::month_of(Seconds(jan1 + (365 + 31 + 29) * 86400)) == Bucket{202803});
  // "an ask of 8 GPUs over [0 h, 10 h). A buyer takes 8 GPUs for [2 h, 4 h). The ask now offers
  // free: [[0h,2h,8],[4h,10h,8]]"
  const std::int64_t h = 3600;
  ref::FreeCapacity free;
  free.add(Seconds(0), Seconds(10 * h), 8);
  free.add(Seconds(2 * h), Seconds(4 * h), -8);
  CHECK(free.pieces() == std::vector<ref::Segment>{{Seconds(0), Seconds(2 * h), 8}, {Seconds(4 * h), Seconds(10 * h), 8}});
  CHECK(free.min(Seconds(1 * h), Seconds(3 * h)) == 0);  // "A bid for [1 h, 3 h) cannot use it"
  CHECK(free.min(Seconds(4 * h), Seconds(6 * h)) == 8);  // "a bid for [4 h, 6 h) can"
  CHECK(free.integral(Seconds(0), Seconds(10 * h)) == 8 * 8 * h);
  // "4 GPUs over [0 h, 10 h). At 3 h the provider cancels: lapsed 12 GPU-hours, cancelled 28 GPU-hours"
  ref::FreeCapacity ask;
  ask.add(Seconds(0), Seconds(10 * h), 4);
  CHECK(ask.integral(Seconds(0), Seconds(3 * h)) == 12 * h);
  CHECK(ask.integral(Seconds(3 * h), Seconds(10 * h)) == 28 * h);
  ask.close_from(Seconds(3 * h));
  CHECK(ask.pieces() == std::vector<ref::Segment>{{Seconds(0), Seconds(3 * h), 4}});
  CHECK(ask.at(Seconds(3 * h)) == 0);
  // The green table of DESIGN.md §4 as policy rows (bounds inclusive: "< 1.30" is at most 1.299):
  // green_plus: PUE <= 1.15, renewable >= 80 %, carbon <= 100 g/kWh, 20 %; green: PUE < 1.30, renewable > 50 %,
  // carbon < 400 g/kWh, 15 %.
  struct Rule {
    gpuex::matching::GreenTier tier;
    std::int32_t max_pue_x1000, min_renewable_pct_x100, max_carbon_g_per_kwh_x100, discount_bps;
  };
  struct Policy {
    std::vector<Rule> rules;
  };
  struct Energy {
    std::int32_t pue_x1000, renewable_pct_x100, carbon_g_per_kwh_x100;
  };
  using gpuex::matching::GreenTier;
  const Policy table{{{GreenTier::green_plus, 1150, 8000, 10000, 2000}, {GreenTier::green, 1299, 5001, 39999, 1500}}};
  CHECK(ref::green_class(table, Energy{1150, 8000, 10000}).discount_bps == 2000);
  CHECK(ref::green_class(table, Energy{1151, 8000, 10000}).tier == GreenTier::green);
  CHECK(ref::green_class(table, Energy{1299, 5001, 39999}).discount_bps == 1500);
  CHECK(ref::green_class(table, Energy{1300, 9000, 5000}).tier == GreenTier::none);
  CHECK(ref::green_class(table, Energy{1100, 5000, 5000}).tier == GreenTier::none);
  CHECK(ref::green_class(table, Energy{1100, 9000, 40000}).discount_bps == 0);
  CHECK(ref::green_class(Policy{}, Energy{1100, 9000, 5000}).tier == GreenTier::none);
}
