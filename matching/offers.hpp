// Real GPU rental offers (data/vast-offers-*.csv) turned into pools and ask prices, for benchmarks,
// demos and the replay load generator. Pure: it parses text it is given and draws what the offers
// lack (tier beyond the datacenter hint, fabric, SLA, energy) from a seeded generator, so the same
// text and seed always give the same pools.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "matching/pool.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

struct Offer {
  PoolSpec pool;         // market from the offer's GPU; region, fees from the offer; the rest drawn
  Price price;           // the offer's price per GPU-hour, rounded to the 0.0001 tick
  std::int64_t machine;  // the offer's machine id (several offers may share one)
};

// Every offer of `csv` that maps to a market (data/README.md): 48 GB RTX 4090s and rows without a
// country are left out. Throws std::invalid_argument when the header is not the offers file's.
std::vector<Offer> parse_offers(std::string_view csv, std::uint64_t seed);

// The ten markets the offers cover.
std::vector<MarketId> offer_markets();

}  // namespace gpuex::matching
