// Default green programme and classification.
#include "matching/green_policy.hpp"

namespace gpuex::matching {

GreenPolicy GreenPolicy::defaults() {
  GreenPolicy p;
  p.rules.push_back(GreenTierRule{GreenTier::green_plus, 1150, 8000, 10000, 2000});
  p.rules.push_back(GreenTierRule{GreenTier::green, 1299, 5001, 39999, 1500});
  return p;
}

const GreenTierRule* GreenPolicy::classify(const EnergyAttributes& e) const {
  for (const GreenTierRule& r : rules) {
    if (e.pue_x1000 <= r.max_pue_x1000 && e.renewable_pct_x100 >= r.min_renewable_pct_x100 &&
        e.carbon_g_per_kwh_x100 <= r.max_carbon_g_per_kwh_x100) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace gpuex::matching
