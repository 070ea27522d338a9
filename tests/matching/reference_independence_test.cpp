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
