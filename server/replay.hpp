// `gpuexd replay`: a load generator that gives a running gpuexd a living market over plain HTTP, like any
// client. It turns the real offers of data/vast-offers-*.csv into provider accounts, pools and asks, then
// runs buyers placing spot and forward bids (some with constraints) at a steady rate, with a progress line.
#pragma once

#include <cstdint>
#include <string>

namespace gpuex {

struct ReplayOptions {
  std::string url = "http://127.0.0.1:8080";  // gpuexd's base URL (plain HTTP)
  std::string admin_key;                     // an API key with the admin scope (creates accounts, verifies pools)
  std::string offers;                        // path of a vast-offers CSV file
  double rate = 5;                           // buy orders per second
  std::int64_t seconds = 0;                  // stop after this long; 0: until SIGINT/SIGTERM
  int buyers = 4;                            // buyer accounts the orders rotate over
  std::uint64_t seed = 1;                    // same seed, same offers mapping and order stream
  int max_pools = 0;                         // 0: one pool per distinct machine of the file
  int progress_every_s = 5;                  // seconds between progress lines
  // If set: the accounts' keys as JSON. An existing file from an earlier run on the same server is reused
  // (its buyers trade again; no new pools); otherwise the accounts made are written to it.
  std::string accounts;
};

// Runs until --seconds pass or a stop signal; returns the process exit code (0 on a clean stop; 1 when
// gpuexd cannot be reached or refuses the set-up, with the reason on stderr).
int replay(const ReplayOptions& options);

}  // namespace gpuex
