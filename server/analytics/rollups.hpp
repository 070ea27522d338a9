// Price-discovery rollups (DESIGN.md §5), maintained incrementally in the store writer's transaction:
// candles (1m, 5m, 1h, 1d per market and bucket), each day's spot volume per price and the daily
// index kept from it (only its two 5 % tails are read back), the last trade per bucket, and open
// interest from reserved leases.
// A transaction's trades are aggregated in memory first, so each touched rollup row is written once,
// by one array statement per table (migrations/0005_analytics.sql has the tables).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "matching/lease.hpp"
#include "matching/trade.hpp"
#include "server/store/connection.hpp"
#include "server/store/writer.hpp"

namespace gpuex::analytics {

// The candle intervals, in seconds, and their names on the wire.
inline constexpr std::int64_t kIntervals[] = {60, 300, 3600, 86400};
std::optional<std::int64_t> parse_interval(std::string_view name);  // "1m", "5m", "1h", "1d"
std::string_view interval_name(std::int64_t seconds);                 // and back

// The daily index is computed here, not in PostgreSQL: each touched (market, day) keeps its price
// ladder (spot volume per price, as in index_prices) in memory, read once from index_prices on its
// first touch, so a transaction writes the day's finished index row instead of asking PostgreSQL to
// read the day's tails back. The ladders are dropped whenever a transaction fails or the connection
// is new, and read again from what committed.
class Rollups final : public store::TransactionPart {
 public:
  void prepare(store::PgConnection& conn) override;
  void before(store::PgConnection& conn, const std::vector<store::Batch>& batches) override;
  std::size_t write(store::Pipeline& pipe, const std::vector<store::Batch>& batches) override;
  void rolled_back() override { ladders_.clear(); }

  // The same work for trades and lease states given directly (a lease listed twice: the last state
  // counts). load_days first, outside the transaction, then write_rows inside it. Returns the number
  // of statements sent.
  void load_days(store::PgConnection& conn, std::span<const matching::Trade* const> trades);
  std::size_t write_rows(store::Pipeline& pipe, std::span<const matching::Trade* const> trades,
                         std::span<const matching::Lease* const> leases);

 private:
  struct Ladder {
    std::map<std::int64_t, matching::Int128> volume;  // price_micros -> gpu-seconds
    matching::Int128 gpu_seconds = 0, notional = 0;   // Σ volume, Σ price × volume
    std::int64_t trades = 0;
  };
  std::map<std::pair<std::string, std::int64_t>, Ladder> ladders_;  // (market, day)
};

// Integer text of a 128-bit value, and back (numeric sums from PostgreSQL are integers).
std::string to_text(matching::Int128 v);
std::optional<matching::Int128> parse_int128(std::string_view text);

// Creates the monthly trade partitions from `from_at`'s month up to `to_at` (gpuex_ensure_trade_partitions).
int ensure_trade_partitions(store::PgConnection& conn, std::int64_t from_at, std::int64_t to_at);

}  // namespace gpuex::analytics
