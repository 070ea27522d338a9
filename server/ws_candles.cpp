// See ws_candles.hpp.
#include "server/ws_candles.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "server/analytics/candle_json.hpp"
#include "server/analytics/rollups.hpp"

namespace gpuex::ws {

namespace json = boost::json;

namespace {

// The candles of (market, bucket) in a range of periods of each interval: $1 market, $2 bucket, then
// the first and last period start of 1m, 5m, 1h and 1d. Columns as sql::kSelectCandles, then
// interval_s; the newest 2,000 if a long outage left more.
constexpr const char* kSelectTouched = R"sql(
SELECT period_start, open_micros, high_micros, low_micros, close_micros, trades, gpu_seconds, notional, interval_s
FROM candles WHERE market = $1 AND bucket = $2 AND (
  (interval_s = 60 AND period_start BETWEEN $3 AND $4) OR (interval_s = 300 AND period_start BETWEEN $5 AND $6) OR
  (interval_s = 3600 AND period_start BETWEEN $7 AND $8) OR (interval_s = 86400 AND period_start BETWEEN $9 AND $10))
ORDER BY period_start DESC LIMIT 2000)sql";

constexpr auto kRetryAfter = std::chrono::seconds(1);

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
    merge(r);
  }
  wake_.notify_one();
}

void CandlePublisher::merge(const CandleRequest& r) {
  Pending& p = pending_[{std::string(r.market.value()), to_string(r.bucket)}];
  if (r.snapshot) {
    if (!p.snapshot) p.snapshot = r;  // read as of the time it is read (run())
  } else if (!p.update) {
    p.update = r;
  } else {
    p.update->include(r.from, r.at);
  }
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
    std::vector<CandleRequest> failed;
    for (auto& [key, p] : work) {
      // An update reaches the waiting subscribers too; the snapshot then finds none and is dropped.
      if (p.update && !read(*p.update)) failed.push_back(*p.update);
      if (p.snapshot) {
        p.snapshot->from = p.snapshot->at = hub_.now_ms() / 1000;  // the current candle when it is read
        if (!read(*p.snapshot)) failed.push_back(*p.snapshot);
      }
    }
    if (failed.empty()) continue;
    // Asked again after a pause, so that a subscriber still waiting gets its first message and the
    // candles an update missed are sent once PostgreSQL answers.
    std::unique_lock lock(mutex_);
    if (wake_.wait_for(lock, kRetryAfter, [&] { return stopping_; })) return;
    for (const auto& r : failed) merge(r);
  }
}

bool CandlePublisher::read(const CandleRequest& r) {
  std::string bucket_name = to_string(r.bucket);
  std::map<std::int64_t, std::vector<json::value>> candles;  // interval -> its candles, oldest first
  try {
    if (!db_ || !db_->healthy()) {
      db_.reset();
      db_.emplace(store::PgConnection::connect(dsn_));
    }
    const std::string market(r.market.value());
    auto perf = perf_.find(market);
    if (perf == perf_.end()) perf = perf_.emplace(market, analytics::perf_e6(*db_, market)).first;
    std::vector<store::Param> params{market, bucket_name};
    for (auto interval : analytics::kIntervals) {
      params.push_back(std::to_string(floor_to(r.from, interval)));
      params.push_back(std::to_string(floor_to(r.at, interval)));
    }
    auto rows = db_->exec(kSelectTouched, params);
    for (int i = rows.rows() - 1; i >= 0; --i) {
      candles[rows.integer(i, 8)].push_back(analytics::candle_json(analytics::candle_row(rows, i), perf->second));
    }
  } catch (const std::exception& e) {
    spdlog::warn("candles of {}:{} not read ({}); asking again in {} s", r.market.value(), bucket_name, e.what(),
                 kRetryAfter.count());
    db_.reset();
    return false;
  }
  for (auto interval : analytics::kIntervals) {
    auto& list = candles[interval];
    if (list.empty()) list.emplace_back(nullptr);  // no trade in the period
    for (auto& candle : list) hub_.publish_candle(r.market, r.bucket, interval, std::move(candle), r.snapshot);
  }
  return true;
}

}  // namespace gpuex::ws
