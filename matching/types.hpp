// Strong value types of the market: money, quantities, time, ids, and the small enums every file shares.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gpuex::matching {

__extension__ typedef __int128 Int128;  // exact intermediate for price x GPUs x seconds

// An integer amount of one unit; arithmetic only with itself, so a price cannot be added to a quantity.
template <class Tag>
struct Amount {
  std::int64_t value{0};

  constexpr Amount() = default;
  constexpr explicit Amount(std::int64_t v) : value(v) {}
  constexpr auto operator<=>(const Amount&) const = default;
  constexpr Amount operator+(Amount o) const { return Amount(value + o.value); }
  constexpr Amount operator-(Amount o) const { return Amount(value - o.value); }
  constexpr Amount& operator+=(Amount o) { value += o.value; return *this; }
  constexpr Amount& operator-=(Amount o) { value -= o.value; return *this; }
  constexpr Amount operator-() const { return Amount(-value); }
};

// An identifier: comparable and hashable, no arithmetic.
template <class Tag>
struct Id {
  std::int64_t value{0};

  constexpr Id() = default;
  constexpr explicit Id(std::int64_t v) : value(v) {}
  constexpr auto operator<=>(const Id&) const = default;
  constexpr explicit operator bool() const { return value != 0; }
};

struct PriceTag {};
struct QtyTag {};
struct SecondsTag {};
struct OrderTag {};
struct PoolTag {};
struct LeaseTag {};
struct TradeTag {};
struct AccountTag {};

using Price = Amount<PriceTag>;      // micro-dollars (1e-6 USD) per GPU-hour
using Qty = Amount<QtyTag>;          // whole GPUs
using Seconds = Amount<SecondsTag>;  // Unix seconds (a time) or a number of seconds (a duration)
using OrderId = Id<OrderTag>;        // = the seq of the PlaceOrder command that created it
using PoolId = Id<PoolTag>;          // = the seq of the AddPool command that created it
using LeaseId = Id<LeaseTag>;        // engine counter, part of state
using TradeId = Id<TradeTag>;        // engine counter, part of state
using AccountId = Id<AccountTag>;    // assigned by the server
using Seq = std::int64_t;            // command sequence number, strictly increasing
using Micros = std::int64_t;         // a money total in micro-dollars

// A market key such as "H100-SXM-80G", at most kMaxSize bytes (the markets table's rule): a pointer to its name
// in a process-wide table that only grows. Every order, trade, lease and book delta carries one, and a
// std::string's copy was ~39 instructions where this is one move. Equal names are one entry, so `==` compares
// pointers; `<=>` compares the names, as the std::string it replaces did (maps and sorted outputs keep their order).
class MarketId {
 public:
  static constexpr std::size_t kMaxSize = 40;

  MarketId() = default;  // the empty name
  // Enters `name` in the table (once). Throws std::length_error for a longer name (never truncated). For names
  // the process trusts (its markets, its command log and snapshots, tests): the table is never freed.
  explicit MarketId(std::string_view name);
  // The id of a name already in the table, else none: for names from clients, who must not grow it.
  static std::optional<MarketId> existing(std::string_view name);

  std::string_view value() const { return name_ ? std::string_view(*name_) : std::string_view(); }
  bool empty() const { return name_ == nullptr; }

  friend bool operator==(MarketId a, MarketId b) { return a.name_ == b.name_; }
  friend std::strong_ordering operator<=>(MarketId a, MarketId b) {
    return a.name_ == b.name_ ? std::strong_ordering::equal : a.value() <=> b.value();
  }

 private:
  explicit MarketId(const std::string* name) : name_(name) {}
  const std::string* name_{nullptr};  // null: the empty name
};

// Delivery bucket of a book view or trade: spot (0) or a UTC month written yyyymm (202701 = "2027-01").
struct Bucket {
  std::int32_t yyyymm{0};
  auto operator<=>(const Bucket&) const = default;
  bool is_spot() const { return yyyymm == 0; }
  static Bucket spot() { return Bucket{}; }
};

// The month bucket that contains a Unix time (UTC).
Bucket month_bucket(Seconds t);

enum class Side : std::uint8_t { buy, sell };
enum class Tier : std::uint8_t { bare_metal, instance, spot };
enum class Fabric : std::uint8_t { ethernet, roce, infiniband };  // ordered: ethernet < roce < infiniband
enum class TimeInForce : std::uint8_t { gtc, gtd, ioc, fok };
enum class StpMode : std::uint8_t { cancel_newest, cancel_oldest, cancel_both };
enum class OrderStatus : std::uint8_t { open, partially_filled, filled, cancelled, expired, rejected };
enum class LeaseStatus : std::uint8_t { reserved, active, completed, preempted, released };
enum class GreenTier : std::uint8_t { none, green, green_plus };
enum class Liquidity : std::uint8_t { maker, taker };

// Why an order or command was refused or ended; the snake_case name reaches the client unchanged.
enum class Reason : std::uint8_t {
  none,
  insufficient_pool_capacity,
  window_in_past,
  quantity_not_multiple_of_chunk,
  exposure_limit,
  market_halted,
  off_tick,
  pool_busy,
  would_take,
  self_trade,
  idempotency_conflict,
  expired,
  not_found,       // unknown market, pool, order or lease, or another account's
  invalid_field,   // a field or combination the server should already have refused
  invalid_amend,   // amend that raises quantity or goes below the filled part (a lot broken: not_multiple_of_chunk)
  lease_not_open,  // release of a lease that is no longer reserved or active
};

std::string_view to_string(Side);
std::string_view to_string(Tier);
std::string_view to_string(Fabric);
std::string_view to_string(TimeInForce);
std::string_view to_string(StpMode);
std::string_view to_string(OrderStatus);
std::string_view to_string(LeaseStatus);
std::string_view to_string(GreenTier);
std::string_view to_string(Liquidity);
std::string_view to_string(Reason);
std::string to_string(Bucket);  // "spot" or "2027-01"
std::string format_price(Price);  // "2.050000" USD per GPU-hour (all six decimals, for diagnostics)

inline bool is_terminal(OrderStatus s) {
  return s == OrderStatus::filled || s == OrderStatus::cancelled || s == OrderStatus::expired ||
         s == OrderStatus::rejected;
}

}  // namespace gpuex::matching

template <class Tag>
struct std::hash<gpuex::matching::Id<Tag>> {
  std::size_t operator()(gpuex::matching::Id<Tag> id) const noexcept {
    return std::hash<std::int64_t>{}(id.value);
  }
};
