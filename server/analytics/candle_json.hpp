// Prices and candles as the analytics endpoints and the candles WebSocket channel show them: prices
// as decimal strings, each also `*_normalized` (USD per H100-equivalent GPU-hour: the price ÷ the
// market's perf_factor), volumes in GPU-hours. One builder, so a channel's candle equals the REST one.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "matching/money.hpp"
#include "server/store/connection.hpp"

namespace gpuex::analytics {

// The market's perf_factor × 10^6 (markets.perf_factor has 6 decimals); throws StoreError.
std::int64_t perf_e6(store::PgConnection& db, const std::string& market);
// An integer numeric column (sums); throws StoreError if it is not one.
matching::Int128 numeric(const store::PgResult& rows, int r, int c);

std::int64_t ratio(matching::Int128 num, matching::Int128 den);  // rounded half to even
std::string gpu_hours(matching::Int128 gpu_seconds);             // "12.000000"

// A price in micro-dollars per GPU-hour as an exact quotient (a VWAP or an index is num / den), so
// that the price and its normalized value are each rounded once, half to even; a plain price
// converts with den 1.
struct ExactPrice {
  ExactPrice(std::int64_t micros) : num(micros) {}  // NOLINT(google-explicit-constructor): a price is exact
  ExactPrice(matching::Int128 n, matching::Int128 d) : num(n), den(d) {}
  std::int64_t micros() const { return ratio(num, den); }
  matching::Int128 num = 0, den = 1;
};

// The price ÷ perf_factor, rounded half to even, as "2.0500".
std::string normalized(ExactPrice price, std::int64_t perf);
// Adds "<key>" and "<key>_normalized" (null when there is no price).
void put_price(boost::json::object& o, std::string_view key, std::optional<ExactPrice> price, std::int64_t perf);

// One candle row, in the columns of sql::kSelectCandles (period_start, open, high, low, close,
// trades, gpu_seconds, notional).
struct CandleRow {
  std::int64_t start = 0, open = 0, high = 0, low = 0, close = 0, trades = 0;
  matching::Int128 gpu_seconds = 0, notional = 0;
  ExactPrice vwap() const { return {notional, gpu_seconds}; }
};
CandleRow candle_row(const store::PgResult& rows, int r);
// {"start", "open", "open_normalized", "high", …, "vwap", "vwap_normalized", "volume_gpu_hours", "trades"}
boost::json::object candle_json(const CandleRow& k, std::int64_t perf);

}  // namespace gpuex::analytics
