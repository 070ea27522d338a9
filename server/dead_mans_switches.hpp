// The dead man's switch of API.md (`cancel_on_disconnect`), made durable. An armed connection has a row
// in `dead_mans_switches` (migration 0010) written before the client hears "enabled"; when the
// connection ends — the client leaves, the TCP connection drops, it falls silent, or the server stops —
// the account's open orders are cancelled and the row is deleted in that same transaction. A cancel the store
// does not take is retried every second while the server runs; what is left when the process ends
// (a crash, or a stop while PostgreSQL was away) is done by the next start before it takes traffic.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "server/engine_runner.hpp"
#include "server/store/connection.hpp"
#include "server/store/query_pool.hpp"

namespace gpuex {

class DeadMansSwitches {
 public:
  DeadMansSwitches(store::QueryPool& queries, EngineRunner& runner,
                   std::chrono::milliseconds retry_every = std::chrono::seconds(1));
  ~DeadMansSwitches();
  DeadMansSwitches(const DeadMansSwitches&) = delete;
  DeadMansSwitches& operator=(const DeadMansSwitches&) = delete;

  // Writes the switch of a connection of `account`; `done` hears its row id, or nullopt when the store
  // did not take it (the switch is then off). Runs `done` on a store thread.
  void arm(std::int64_t account, std::function<void(std::optional<std::int64_t>)> done);
  // Deletes switch `id`; `done(false)` when the store did not take it (the switch is then still on).
  void disarm(std::int64_t id, std::function<void(bool)> done);
  // The connection that armed switch `id` ended: cancels every open order of `account` and deletes the
  // switch, in one transaction.
  void fire(std::int64_t account, std::int64_t id);

  // At start, with the engine running and before traffic: fires the switches the last run left and
  // waits (up to `wait`) for their cancels. Returns how many accounts had one.
  std::size_t recover(store::PgConnection& db, std::chrono::milliseconds wait);

  // Fires whose cancel has not committed (or been given up) yet; a graceful stop waits for them.
  std::size_t pending() const { return pending_.load(); }
  // No more retries: what has not committed stays in the table for the next start.
  void stop();

 private:
  void cancel(std::int64_t account, std::vector<std::int64_t> ids);

  store::QueryPool& queries_;
  EngineRunner& runner_;
  std::chrono::milliseconds retry_every_;
  boost::asio::thread_pool timers_{1};
  std::atomic<std::size_t> pending_{0};
  std::atomic<bool> stopped_{false};
};

}  // namespace gpuex
