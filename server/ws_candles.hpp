// The candles:{market}:{bucket}:{interval} channels' reader (API.md). Candles are the committed
// rollups (server/analytics/rollups.*), so they are read back from PostgreSQL — on this class's own
// thread and connection, never on the writer thread or under the hub's lock. The hub asks for a read
// after trades of a (market, bucket) with candle subscribers committed, and for a new subscriber's
// first message; requests for the same pair wait coalesced. An update reads every candle its trades
// touched (one commit's trades can straddle a period's end: the closed period's final state is sent
// too, oldest first); a first message is the current candle of every interval. A failed read is
// logged and asked again a second later.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "server/store/connection.hpp"
#include "server/ws_hub.hpp"

namespace gpuex::ws {

class CandlePublisher {
 public:
  // Starts the thread; connects lazily (and again after a failure).
  CandlePublisher(std::string dsn, Hub& hub);
  ~CandlePublisher();
  CandlePublisher(const CandlePublisher&) = delete;
  CandlePublisher& operator=(const CandlePublisher&) = delete;

  // Queues a read (thread-safe, never waits for the database).
  void request(CandleRequest r);
  // Ends the thread after the read in progress; later requests are dropped.
  void stop();

 private:
  struct Pending {
    std::optional<CandleRequest> update;
    std::optional<CandleRequest> snapshot;
  };
  void run();
  // Adds `r` to what waits for its (market, bucket); the caller holds mutex_.
  void merge(const CandleRequest& r);
  // Reads the candles of the periods from `r.from`'s to `r.at`'s of every interval and hands them to
  // the hub (null for an interval without any); false if PostgreSQL did not answer.
  bool read(const CandleRequest& r);

  std::string dsn_;
  Hub& hub_;
  std::optional<store::PgConnection> db_;
  std::map<std::string, std::int64_t> perf_;  // market -> perf_factor × 10^6

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<std::pair<std::string, std::string>, Pending> pending_;
  std::thread thread_;
};

}  // namespace gpuex::ws
