// See book_views.hpp.
#include "server/book_views.hpp"

#include <limits>

namespace gpuex {

using namespace matching;

void BookViews::reset(const Engine& engine) {
  std::map<std::pair<MarketId, std::int32_t>, View> fresh;
  for (const auto& vs : engine.snapshot().view_sequences) {
    Depth d = engine.depth(vs.market, vs.bucket, std::numeric_limits<int>::max());
    View& v = fresh[{vs.market, vs.bucket.yyyymm}];
    v.sequence = d.sequence;
    for (const auto& l : d.bids) v.bids[l.price.value] = l.quantity.value;
    for (const auto& l : d.asks) v.asks[l.price.value] = l.quantity.value;
    v.constrained = d.constrained_bids;
  }
  std::lock_guard lock(mutex_);
  views_ = std::move(fresh);
}

void BookViews::apply(const BookDelta& delta) {
  std::lock_guard lock(mutex_);
  View& v = views_[{delta.market, delta.bucket.yyyymm}];
  v.sequence = delta.sequence;
  for (const auto& c : delta.changes) {
    auto set = [&](auto& side) {
      if (c.quantity.value == 0) side.erase(c.price.value);
      else side[c.price.value] = c.quantity.value;
    };
    if (c.side == Side::buy) set(v.bids);
    else set(v.asks);
  }
  v.constrained = delta.constrained_bids;
}

Depth BookViews::get(const MarketId& market, Bucket bucket, std::size_t levels) const {
  Depth d;
  std::lock_guard lock(mutex_);
  auto it = views_.find({market, bucket.yyyymm});
  if (it == views_.end()) return d;
  const View& v = it->second;
  d.sequence = v.sequence;
  for (auto l = v.bids.begin(); l != v.bids.end() && d.bids.size() < levels; ++l) {
    d.bids.push_back(Level{Price(l->first), Qty(l->second)});
  }
  for (auto l = v.asks.begin(); l != v.asks.end() && d.asks.size() < levels; ++l) {
    d.asks.push_back(Level{Price(l->first), Qty(l->second)});
  }
  d.constrained_bids = v.constrained;
  return d;
}

std::vector<Bucket> BookViews::buckets(const MarketId& market) const {
  std::vector<Bucket> out;
  std::lock_guard lock(mutex_);
  for (auto it = views_.lower_bound({market, std::numeric_limits<std::int32_t>::min()});
       it != views_.end() && it->first.first == market; ++it) {
    out.push_back(Bucket{it->first.second});
  }
  return out;
}

}  // namespace gpuex
