// The SQL the analytics endpoints run on the rollups (server/routes_analytics.cpp), shared with
// bench/analytics so the benchmark times the very queries the server runs.
#pragma once

namespace gpuex::analytics::sql {

// $1 market, $2 bucket, $3 interval seconds, $4 from, $5 to (period starts in [from, to)).
inline constexpr const char* kSelectCandles = R"sql(
SELECT period_start, open_micros, high_micros, low_micros, close_micros, trades, gpu_seconds, notional
FROM candles WHERE market = $1 AND bucket = $2 AND interval_s = $3 AND period_start >= $4 AND period_start < $5
ORDER BY period_start)sql";
inline constexpr const char* kSelectLast = R"sql(
SELECT bucket, price_micros, at FROM last_trades WHERE market = $1 AND bucket <> 'spot' AND bucket >= $2)sql";
inline constexpr const char* kSelectWeek = R"sql(
SELECT bucket, sum(gpu_seconds), sum(notional), sum(trades) FROM candles
WHERE market = $1 AND interval_s = 86400 AND period_start >= $3 AND bucket <> 'spot' AND bucket >= $2
GROUP BY bucket)sql";
inline constexpr const char* kSelectOpenInterest = R"sql(
SELECT bucket, gpu_seconds FROM open_interest
WHERE market = $1 AND bucket <> 'spot' AND bucket >= $2 AND gpu_seconds > 0)sql";
// $1 market, $2 from (a minute), $3 now, $4 the first whole hour at or after from, $5 the hour of now:
// one-minute candles at the edges, hourly ones for the whole hours between.
inline constexpr const char* kSelectStats = R"sql(
SELECT coalesce(sum(trades), 0), coalesce(sum(gpu_seconds), 0), coalesce(sum(notional), 0), max(high_micros),
       min(low_micros), coalesce(sum(green_gpu_seconds), 0), coalesce(sum(discount), 0)
FROM candles
WHERE market = $1 AND ((interval_s = 60 AND ((period_start >= $2 AND period_start < $4) OR
                                             (period_start >= $5 AND period_start <= $3))) OR
                       (interval_s = 3600 AND period_start >= $4 AND period_start < $5)))sql";
// $1 market, $2 from, $3 to (days starting in [from, to)).
inline constexpr const char* kSelectIndex = R"sql(
SELECT day, gpu_seconds, trimmed_x20, trades FROM daily_index
WHERE market = $1 AND day >= $2 AND day < $3 AND gpu_seconds > 0
ORDER BY day)sql";

}  // namespace gpuex::analytics::sql
