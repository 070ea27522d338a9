// See query_pool.hpp.
#include "server/store/query_pool.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>

namespace gpuex::store {

QueryPool::QueryPool(std::string dsn, std::size_t threads) : dsn_(std::move(dsn)), threads_(threads) {}

QueryPool::~QueryPool() { stop(); }

void QueryPool::stop() { threads_.join(); }

PgConnection QueryPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    while (!idle_.empty()) {
      PgConnection conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn.healthy()) return conn;
    }
  }
  return PgConnection::connect(dsn_, std::chrono::seconds(2));
}

void QueryPool::release(PgConnection conn) {
  if (!conn.healthy()) return;
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(conn));
}

void QueryPool::submit(std::function<void(PgConnection&)> job,
                      std::function<void(const std::string&)> on_error) {
  boost::asio::post(threads_, [this, job = std::move(job), on_error = std::move(on_error)] {
    try {
      PgConnection conn = acquire();
      try {
        job(conn);
      } catch (const StoreError&) {
        // A failed statement may leave the connection in a bad state; a broken one is dropped, and
        // so are the idle ones: the server they were opened on is most likely gone too (a restart),
        // and libpq only notices on their next use.
        if (!conn.healthy()) {
          std::lock_guard lock(mutex_);
          idle_.clear();
        }
        release(std::move(conn));
        throw;
      }
      release(std::move(conn));
    } catch (const StoreError& e) {
      on_error(e.what());
    } catch (const std::exception& e) {
      // Not the database's failure but this job's (a row it did not expect): an exception must not
      // leave the thread pool, which would end the process. The caller answers as for a failed read.
      spdlog::error("a query job failed: {}", e.what());
      on_error(e.what());
    }
  });
}

}  // namespace gpuex::store
