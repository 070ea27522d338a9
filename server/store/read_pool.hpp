// Read queries on their own PostgreSQL connections and threads, never on I/O or engine threads.
#pragma once

#include <boost/asio/thread_pool.hpp>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "server/store/connection.hpp"

namespace gpuex::store {

class ReadPool {
 public:
  ReadPool(std::string dsn, std::size_t threads);
  ~ReadPool();
  ReadPool(const ReadPool&) = delete;
  ReadPool& operator=(const ReadPool&) = delete;

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
