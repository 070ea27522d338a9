// PostgreSQL work outside the engine's write path (reads, account and key admin), on its own
// connections and threads, never on I/O or engine threads.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "server/store/connection.hpp"

namespace gpuex::store {

class QueryPool {
 public:
  QueryPool(std::string dsn, std::size_t threads);
  ~QueryPool();
  QueryPool(const QueryPool&) = delete;
  QueryPool& operator=(const QueryPool&) = delete;

  // Runs `job` on a pool thread with a healthy connection. When no connection can be had, or the job
  // throws StoreError, `on_error` runs instead (on the same pool thread) with the message.
  void submit(std::function<void(PgConnection&)> job, std::function<void(const std::string&)> on_error);

  // Waits for the queued jobs and stops the threads.
  void stop();

 private:
  PgConnection acquire();
  void release(PgConnection conn);

  std::string dsn_;
  boost::asio::thread_pool threads_;
  std::mutex mutex_;
  std::vector<PgConnection> idle_;
};

}  // namespace gpuex::store
