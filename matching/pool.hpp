// A provider's pool: identical nodes in one place, with the attributes bids constrain on.
#pragma once

#include <cstdint>
#include <string>

#include "matching/green_policy.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

// What a provider registers (API.md "Registering a pool"), in fixed-scale integers.
struct PoolSpec {
  MarketId market;
  std::string region;  // ISO 3166 alpha-2, e.g. "US"
  Tier tier{Tier::bare_metal};
  std::int32_t gpus_per_node{1};
  std::int32_t nodes{0};
  bool nvlink{false};
  Fabric fabric{Fabric::ethernet};
  std::int32_t fabric_gbps{0};
  std::int32_t sla_pct_x1000{0};  // 99.9 % -> 99900
  EnergyAttributes energy;        // self-declared until verified
  Micros egress_per_gb{0};        // fees beside the GPU price, micro-dollars
  Micros storage_per_gb_month{0};
  Micros ip_per_month{0};
  bool operator==(const PoolSpec&) const = default;
};

struct Pool {
  PoolId id;
  AccountId provider;
  PoolSpec spec;
  bool verified{false};          // energy attributes verified by an admin...
  Seconds verified_until;        // ...until this instant (exclusive)
  std::string evidence;
  GreenTier green_tier{GreenTier::none};  // from verified, unexpired attributes under the policy
  std::int32_t green_discount_bps{0};
  bool retired{false};
  Seconds created_at;
  Seconds updated_at;
  bool operator==(const Pool&) const = default;

  Qty gpus() const { return Qty(std::int64_t{spec.gpus_per_node} * spec.nodes); }
  bool verified_at(Seconds now) const { return verified && now < verified_until; }
};

}  // namespace gpuex::matching
