// See offers.hpp. Mapping of GPU names to markets: data/README.md.
#include "matching/offers.hpp"

#include <array>
#include <charconv>
#include <stdexcept>
#include <string>

namespace gpuex::matching {
namespace {

// SplitMix64: small, fast and the same everywhere.
struct SplitMix {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::int64_t between(std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1));
  }
};

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    auto comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

// A decimal such as "0.093333" scaled by 10^scale, rounded half up (inputs are non-negative).
std::int64_t scaled(std::string_view text, int scale) {
  std::int64_t whole = 0, frac = 0;
  int digits = 0;
  bool round_up = false;
  auto dot = text.find('.');
  auto w = text.substr(0, dot);
  std::from_chars(w.data(), w.data() + w.size(), whole);
  if (dot != std::string_view::npos) {
    for (char c : text.substr(dot + 1)) {
      if (c < '0' || c > '9') break;
      if (digits < scale) {
        frac = frac * 10 + (c - '0');
        ++digits;
      } else if (digits == scale) {
        round_up = c >= '5';
        ++digits;
      }
    }
  }
  for (; digits < scale; ++digits) frac *= 10;
  std::int64_t unit = 1;
  for (int i = 0; i < scale; ++i) unit *= 10;
  return whole * unit + frac + (round_up ? 1 : 0);
}

std::string market_of(std::string_view gpu, std::string_view ram_mb) {
  if (gpu == "A100 PCIE") return ram_mb == "40960" ? "A100-PCIE-40G" : ram_mb == "81920" ? "A100-PCIE-80G" : "";
  if (gpu == "H100 PCIE") return "H100-PCIE-80G";
  if (gpu == "H100 SXM") return "H100-SXM-80G";
  if (gpu == "H200") return "H200-SXM-141G";
  if (gpu == "H200 NVL") return "H200-NVL-141G";
  if (gpu == "L40S") return "L40S-48G";
  if (gpu == "RTX 4090") return ram_mb == "23028" || ram_mb == "24564" ? "RTX4090-24G" : "";
  if (gpu == "Tesla V100") return ram_mb == "32768" ? "V100-SXM2-32G" : ram_mb == "16384" ? "V100-16G" : "";
  return "";
}

}  // namespace

std::vector<MarketId> offer_markets() {
  std::vector<MarketId> markets;
  for (std::string_view m : {"A100-PCIE-40G", "A100-PCIE-80G", "H100-PCIE-80G", "H100-SXM-80G", "H200-SXM-141G",
                             "H200-NVL-141G", "L40S-48G", "RTX4090-24G", "V100-SXM2-32G", "V100-16G"}) {
    markets.emplace_back(m);
  }
  return markets;
}

std::vector<Offer> parse_offers(std::string_view csv, std::uint64_t seed) {
  SplitMix rng{seed};
  std::vector<Offer> out;
  std::size_t pos = 0;
  bool header = true;
  // Columns: collected_utc,offer_id,machine_id,gpu_name,num_gpus,gpu_ram_mb,price_gpu_hour,
  // min_bid_machine_hour,storage_usd_per_gb_month,egress_usd_per_gb,ingress_usd_per_gb,reliability,
  // dlperf,total_flops_tf,gpu_mem_bw_gbps,bw_nvlink,country,datacenter,...
  while (pos < csv.size()) {
    auto end = csv.find('\n', pos);
    auto line = csv.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    pos = end == std::string_view::npos ? csv.size() : end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    auto f = split(line);
    if (header) {
      if (f.size() < 18 || f[3] != "gpu_name" || f[6] != "price_gpu_hour" || f[16] != "country") {
        throw std::invalid_argument("not the offers file: unexpected header");
      }
      header = false;
      continue;
    }
    if (f.size() < 18) continue;
    std::string market = market_of(f[3], f[5]);
    if (market.empty() || f[16].size() != 2) continue;

    Offer o;
    o.machine = scaled(f[2], 0);
    PoolSpec& p = o.pool;
    p.market = MarketId{market};
    p.region = std::string(f[16]);
    p.gpus_per_node = static_cast<std::int32_t>(std::max<std::int64_t>(1, scaled(f[4], 0)));
    p.nodes = 1;
    // datacenter=True is a fair hint for bare metal; a share of the rest is sold as interruptible spot.
    bool datacenter = f[17] == "True";
    p.tier = datacenter ? Tier::bare_metal : (rng.between(0, 3) == 0 ? Tier::spot : Tier::instance);
    p.nvlink = scaled(f[15], 0) > 0;
    std::int64_t fabric = rng.between(0, 9);
    p.fabric = datacenter && fabric >= 6 ? Fabric::infiniband : fabric >= 4 ? Fabric::roce : Fabric::ethernet;
    p.fabric_gbps = p.fabric == Fabric::infiniband ? 400 : p.fabric == Fabric::roce ? 200 : 25;
    // The offer's reliability (0..1) stands in for the SLA: 0.9987 -> 99.870 %.
    p.sla_pct_x1000 = static_cast<std::int32_t>(std::min<std::int64_t>(100'000, scaled(f[11], 5)));
    // Energy: drawn, self-declared (no offer says anything about it, and none is verified).
    p.energy.pue_x1000 = static_cast<std::int32_t>(rng.between(1080, 1700));
    p.energy.renewable_pct_x100 = static_cast<std::int32_t>(rng.between(0, 100) * 100);
    p.energy.carbon_g_per_kwh_x100 = static_cast<std::int32_t>(rng.between(20, 700) * 100);
    p.egress_per_gb = scaled(f[9], 6);
    p.storage_per_gb_month = scaled(f[8], 6);
    p.ip_per_month = 0;
    // Price per GPU-hour to the 0.0001 tick (100 micro-dollars), never below one tick.
    std::int64_t micros = scaled(f[6], 6);
    o.price = Price(std::max<std::int64_t>(100, (micros + 50) / 100 * 100));
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace gpuex::matching
