// The candle publisher (server/ws_candles.*) against a real PostgreSQL, driven directly: the cases a
// server under load makes but a test cannot time (several commits' trades folded into one read).
#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "server/store/connection.hpp"
#include "server/ws_candles.hpp"
#include "support/cluster.hpp"

using namespace gpuex::test;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

constexpr std::int64_t kNewYear2027 = 1798761600;  // 2027-01-01T00:00:00Z

// Collects what the hub delivers: the JSON of each frame, in order.
class Recorder : public gpuex::ws::Subscriber {
 public:
  bool deliver(const gpuex::ws::Channel&, const std::string&, std::uint64_t, const gpuex::ws::Message& m) override {
    std::lock_guard lock(mutex_);
    const std::string& frame = *m;
    std::size_t header = static_cast<unsigned char>(frame[1]) < 126 ? 2 : 4;  // RFC 6455: short or 16-bit length
    messages_.push_back(json::parse(frame.substr(header)).as_object());
    arrived_.notify_all();
    return false;
  }
  void joined(const std::string&, std::uint64_t) override {}
  void wake() override {}

  // Waits for `n` messages in all (at most 5 s) and returns them.
  std::vector<json::object> wait_for(std::size_t n) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, 5s, [&] { return messages_.size() >= n; });
    return messages_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<json::object> messages_;
};

// A one-minute candle row of H100-SXM-80G spot: one trade of 1 GPU for an hour at `micros`.
void insert_minute(gpuex::store::PgConnection& db, std::int64_t start, std::int64_t micros) {
  db.exec("INSERT INTO candles (market, bucket, interval_s, period_start, open_micros, open_at, open_trade, high_micros, "
          "low_micros, close_micros, close_at, close_trade, trades, gpu_seconds, notional, green_gpu_seconds, discount) "
          "VALUES ('H100-SXM-80G', 'spot', 60, $1::bigint, $2::bigint, $1::bigint, 1, $2::bigint, $2::bigint, $2::bigint, "
          "$1::bigint, 1, 1, 3600, $2::bigint * 3600, 0, 0)",
          {std::to_string(start), std::to_string(micros)});
}

}  // namespace

TEST_CASE("candles: an update whose trades straddle a period's end sends the closed period's final candle, then the new one") {
  TestDatabase tdb;
  REQUIRE(run_gpuexd({"migrate", "--dsn", tdb.dsn()}).exit_code == 0);
  auto db = gpuex::store::PgConnection::connect(tdb.dsn());
  const std::int64_t first_minute = kNewYear2027, second_minute = kNewYear2027 + 60;
  insert_minute(db, first_minute, 2'000'000);   // its last trade at 00:00:59
  insert_minute(db, second_minute, 3'000'000);  // a trade at 00:01:00, in the same commit or read

  gpuex::BookViews views;
  std::int64_t now_ms = (second_minute + 30) * 1000;
  gpuex::ws::Hub hub(views, [&] { return now_ms; });
  gpuex::ws::CandlePublisher publisher(tdb.dsn(), hub);
  hub.set_candle_feed([&](gpuex::ws::CandleRequest r) { publisher.request(std::move(r)); });

  gpuex::ws::Channel channel;
  channel.kind = gpuex::ws::Channel::Kind::candles;
  channel.name = "candles:H100-SXM-80G:spot:1m";
  channel.market = gpuex::matching::MarketId{"H100-SXM-80G"};
  channel.bucket = gpuex::matching::Bucket::spot();
  channel.interval = 60;
  auto recorder = std::make_shared<Recorder>();
  hub.subscribe(channel, recorder);
  auto first = recorder->wait_for(1);
  REQUIRE(first.size() == 1);  // the current candle: the second minute's
  CHECK(first[0].at("seq").as_int64() == 0);
  CHECK(first[0].at("candle").at("start").as_string() == "2027-01-01T00:01:00Z");

  publisher.request({channel.market, channel.bucket, first_minute + 59, second_minute, false});
  auto all = recorder->wait_for(3);
  REQUIRE(all.size() == 3);
  CHECK(all[1].at("seq").as_int64() == 1);
  CHECK(all[1].at("candle").at("start").as_string() == "2027-01-01T00:00:00Z");
  CHECK(all[1].at("candle").at("close").as_string() == "2.0000");
  CHECK(all[2].at("seq").as_int64() == 2);
  CHECK(all[2].at("candle").at("start").as_string() == "2027-01-01T00:01:00Z");
  CHECK(all[2].at("candle").at("close").as_string() == "3.0000");
  publisher.stop();
}
