// The published order books: per (market, bucket) L2 levels updated only by committed deltas, so
// nothing anyone reads can be lost in a crash (DESIGN.md §2). REST and WebSocket views read these,
// never the engine's live state.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "matching/engine.hpp"

namespace gpuex {

// The markets by id (the markets table, loaded at start), looked up by a string_view of a name (std::less<>):
// a request's market name, or MarketId::value(), without a string built for it.
using MarketTable = std::map<std::string, matching::MarketSpec, std::less<>>;

class BookViews {
 public:
  // Replaces every view with the engine's (call when the engine holds only committed state).
  void reset(const matching::Engine& engine);
  // Applies one committed delta.
  void apply(const matching::BookDelta& delta);
  // The top `levels` of a view; an empty view (sequence 0) when it never had an order.
  matching::Depth get(const matching::MarketId& market, matching::Bucket bucket, std::size_t levels) const;
  // The buckets of a market that have a view (in bucket order).
  std::vector<matching::Bucket> buckets(const matching::MarketId& market) const;

 private:
  struct View {
    std::uint64_t sequence = 0;
    std::map<std::int64_t, std::int64_t, std::greater<>> bids;  // price -> GPUs, best first
    std::map<std::int64_t, std::int64_t> asks;
    matching::ConstrainedBids constrained;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<matching::MarketId, std::int32_t>, View> views_;
};

}  // namespace gpuex
