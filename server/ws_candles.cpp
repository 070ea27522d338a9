// See ws_candles.hpp.
#include "server/ws_candles.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/analytics/candle_json.hpp"
#include "server/analytics/rollups.hpp"

namespace gpuex::ws {

namespace json = boost::json;

namespace {

// The current candle of every interval: $1 market, $2 bucket, $3..$6 the period starts of 1m, 5m,
// 1h and 1d containing the time asked for. Columns as sql::kSelectCandles, then interval_s.
constexpr const char* kSelectCurrent = R"sql(
SELECT period_start, open_micros, high_micros, low_micros, close_micros, trades, gpu_seconds, notional, interval_s
FROM candles WHERE market = $1 AND bucket = $2 AND
  (interval_s, period_start) IN ((60, $3::bigint), (300, $4::bigint), (3600, $5::bigint), (86400, $6::bigint)))sql";

std::int64_t floor_to(std::int64_t t, std::int64_t step) {
  std::int64_t r = t % step;
  return r < 0 ? t - r - step : t - r;
}

}  // namespace

CandlePublisher::CandlePublisher(std::string dsn, Hub& hub) : dsn_(std::move(dsn)), hub_(hub) {
  thread_ = std::thread([this] { run(); });
}

CandlePublisher::~CandlePublisher() { stop(); }

void CandlePublisher::request(CandleRequest r) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    auto [it, fresh] = pending_.try_emplace({r.market.value, to_string(r.bucket)});
    Pending& p = it->second;
    if (fresh) p.update = CandleRequest{r.market, r.bucket, -1, false};
    if (r.snapshot) {
      p.snapshot = true;
    } else {
      p.update.at = std::max(p.update.at, r.at);
    }
  }
  wake_.notify_one();
}

void CandlePublisher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    pending_.clear();
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void CandlePublisher::run() {
  for (;;) {
    std::map<std::pair<std::string, std::string>, Pending> work;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      work.swap(pending_);
    }
    for (auto& [key, p] : work) {
      // An update reaches the waiting subscribers too; the snapshot then finds none and is dropped.
      if (p.update.at >= 0) read(p.update.market, p.update.bucket, p.update.at, false);
      if (p.snapshot) read(p.update.market, p.update.bucket, hub_.now_ms() / 1000, true);
    }
  }
}

void CandlePublisher::read(const matching::MarketId& market, const matching::Bucket& bucket, std::int64_t at,
                           bool snapshot) {
  std::string bucket_name = to_string(bucket);
  std::map<std::int64_t, json::value> candles;  // interval -> candle, null without a trade
  try {
    if (!db_ || !db_->healthy()) {
      db_.reset();
      db_.emplace(store::PgConnection::connect(dsn_));
    }
    auto perf = perf_.find(market.value);
    if (perf == perf_.end()) perf = perf_.emplace(market.value, analytics::perf_e6(*db_, market.value)).first;
    std::vector<store::Param> params{market.value, bucket_name};
    for (auto interval : analytics::kIntervals) params.push_back(std::to_string(floor_to(at, interval)));
    auto rows = db_->exec(kSelectCurrent, params);
    for (auto interval : analytics::kIntervals) candles[interval] = nullptr;
    for (int i = 0; i < rows.rows(); ++i) {
      candles[rows.integer(i, 8)] = analytics::candle_json(analytics::candle_row(rows, i), perf->second);
    }
  } catch (const std::exception& e) {
    spdlog::warn("candles of {}:{} not read ({}); the next trade reads them again", market.value, bucket_name,
                 e.what());
    db_.reset();
    return;
  }
  for (auto& [interval, candle] : candles) hub_.publish_candle(market, bucket, interval, std::move(candle), snapshot);
}

}  // namespace gpuex::ws
