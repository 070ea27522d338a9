// The green programme: which verified energy attributes earn which provider-funded discount.
#pragma once

#include <cstdint>
#include <vector>

#include "matching/types.hpp"

namespace gpuex::matching {

// A pool's energy attributes in fixed scale, so thresholds compare exactly.
struct EnergyAttributes {
  std::int32_t pue_x1000{0};               // PUE 1.15 -> 1150
  std::int32_t renewable_pct_x100{0};      // 80 % -> 8000
  std::int32_t carbon_g_per_kwh_x100{0};   // 100 g CO2e/kWh -> 10000
  bool operator==(const EnergyAttributes&) const = default;
};

// One tier: all bounds inclusive (a strict "< 1.30" is written as max 1299).
struct GreenTierRule {
  GreenTier tier{GreenTier::none};
  std::int32_t max_pue_x1000{0};
  std::int32_t min_renewable_pct_x100{0};
  std::int32_t max_carbon_g_per_kwh_x100{0};
  std::int32_t discount_bps{0};
  bool operator==(const GreenTierRule&) const = default;
};

// Rules are tried in order; the first whose bounds all hold gives the tier, otherwise none (0 bps).
struct GreenPolicy {
  std::vector<GreenTierRule> rules;
  bool operator==(const GreenPolicy&) const = default;

  // green_plus: PUE <= 1.15, renewable >= 80 %, carbon <= 100 g/kWh, 2000 bps;
  // green: PUE < 1.30, renewable > 50 %, carbon < 400 g/kWh, 1500 bps.
  static GreenPolicy defaults();

  const GreenTierRule* classify(const EnergyAttributes& e) const;
};

}  // namespace gpuex::matching
