// Names of the enums as they appear on the wire, calendar buckets, and the table of market names.
#include "matching/types.hpp"

#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>

namespace gpuex::matching {

namespace {

// The names MarketIds point to. Never destroyed: a MarketId in a static object may be read after any
// destructor of this file's statics ran.
struct MarketNames {
  std::mutex mutex;
  std::set<std::string, std::less<>> names;  // a set's nodes never move
};

MarketNames& market_names() {
  static auto* const names = new MarketNames;
  return *names;
}

}  // namespace

MarketId::MarketId(std::string_view name) {
  if (name.size() > kMaxSize) {
    throw std::length_error("market name of " + std::to_string(name.size()) + " bytes (at most " +
                            std::to_string(kMaxSize) + "): " + std::string(name));
  }
  if (name.empty()) return;
  MarketNames& t = market_names();
  std::lock_guard lock(t.mutex);
  auto it = t.names.find(name);
  if (it == t.names.end()) it = t.names.emplace(name).first;
  name_ = &*it;
}

std::optional<MarketId> MarketId::existing(std::string_view name) {
  if (name.empty()) return MarketId();
  MarketNames& t = market_names();
  std::lock_guard lock(t.mutex);
  auto it = t.names.find(name);
  if (it == t.names.end()) return std::nullopt;
  return MarketId(&*it);
}

Bucket month_bucket(Seconds t) {
  // Howard Hinnant's civil_from_days.
  std::int64_t days = t.value / 86400;
  if (t.value % 86400 < 0) --days;
  const std::int64_t z = days + 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const std::int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  return Bucket{static_cast<std::int32_t>(y * 100 + m)};
}

std::string to_string(Bucket b) {
  if (b.is_spot()) return "spot";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d", b.yyyymm / 100, b.yyyymm % 100);
  return buf;
}

std::string format_price(Price p) {
  const std::int64_t v = p.value;
  const std::int64_t a = v < 0 ? -v : v;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%lld.%06lld", v < 0 ? "-" : "", static_cast<long long>(a / 1000000),
                static_cast<long long>(a % 1000000));
  return buf;
}

std::string_view to_string(Side s) { return s == Side::buy ? "buy" : "sell"; }

std::string_view to_string(Tier t) {
  switch (t) {
    case Tier::bare_metal: return "bare_metal";
    case Tier::instance: return "instance";
    case Tier::spot: return "spot";
  }
  return "?";
}

std::string_view to_string(Fabric f) {
  switch (f) {
    case Fabric::ethernet: return "ethernet";
    case Fabric::roce: return "roce";
    case Fabric::infiniband: return "infiniband";
  }
  return "?";
}

std::string_view to_string(TimeInForce t) {
  switch (t) {
    case TimeInForce::gtc: return "gtc";
    case TimeInForce::gtd: return "gtd";
    case TimeInForce::ioc: return "ioc";
    case TimeInForce::fok: return "fok";
  }
  return "?";
}

std::string_view to_string(StpMode m) {
  switch (m) {
    case StpMode::cancel_newest: return "cancel_newest";
    case StpMode::cancel_oldest: return "cancel_oldest";
    case StpMode::cancel_both: return "cancel_both";
  }
  return "?";
}

std::string_view to_string(OrderStatus s) {
  switch (s) {
    case OrderStatus::open: return "open";
    case OrderStatus::partially_filled: return "partially_filled";
    case OrderStatus::filled: return "filled";
    case OrderStatus::cancelled: return "cancelled";
    case OrderStatus::expired: return "expired";
    case OrderStatus::rejected: return "rejected";
  }
  return "?";
}

std::string_view to_string(LeaseStatus s) {
  switch (s) {
    case LeaseStatus::reserved: return "reserved";
    case LeaseStatus::active: return "active";
    case LeaseStatus::completed: return "completed";
    case LeaseStatus::preempted: return "preempted";
    case LeaseStatus::released: return "released";
  }
  return "?";
}

std::string_view to_string(GreenTier g) {
  switch (g) {
    case GreenTier::none: return "none";
    case GreenTier::green: return "green";
    case GreenTier::green_plus: return "green_plus";
  }
  return "?";
}

std::string_view to_string(Liquidity l) { return l == Liquidity::maker ? "maker" : "taker"; }

std::string_view to_string(Reason r) {
  switch (r) {
    case Reason::none: return "";
    case Reason::insufficient_pool_capacity: return "insufficient_pool_capacity";
    case Reason::window_in_past: return "window_in_past";
    case Reason::quantity_not_multiple_of_chunk: return "quantity_not_multiple_of_chunk";
    case Reason::exposure_limit: return "exposure_limit";
    case Reason::market_halted: return "market_halted";
    case Reason::off_tick: return "off_tick";
    case Reason::pool_busy: return "pool_busy";
    case Reason::would_take: return "would_take";
    case Reason::self_trade: return "self_trade";
    case Reason::idempotency_conflict: return "idempotency_conflict";
    case Reason::expired: return "expired";
    case Reason::not_found: return "not_found";
    case Reason::invalid_field: return "invalid_field";
    case Reason::invalid_amend: return "invalid_amend";
    case Reason::lease_not_open: return "lease_not_open";
  }
  return "?";
}

}  // namespace gpuex::matching
