// See dead_mans_switches.hpp.
#include "server/dead_mans_switches.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

namespace gpuex {

DeadMansSwitches::DeadMansSwitches(store::QueryPool& queries, EngineRunner& runner,
                                   std::chrono::milliseconds retry_every)
    : queries_(queries), runner_(runner), retry_every_(retry_every) {}

DeadMansSwitches::~DeadMansSwitches() { stop(); }

void DeadMansSwitches::stop() {
  stopped_ = true;
  timers_.stop();
  timers_.join();
}

void DeadMansSwitches::arm(std::int64_t account, std::function<void(std::optional<std::int64_t>)> done) {
  queries_.submit(
      [account, done](store::PgConnection& db) {
        auto r = db.exec("INSERT INTO dead_mans_switches (account_id) VALUES ($1::bigint) RETURNING id",
                         {std::to_string(account)});
        done(r.integer(0, 0));
      },
      [account, done](const std::string& why) {
        spdlog::warn("ws: the dead man's switch of account {} could not be armed: {}", account, why);
        done(std::nullopt);
      });
}

void DeadMansSwitches::disarm(std::int64_t id, std::function<void(bool)> done) {
  queries_.submit(
      [id, done](store::PgConnection& db) {
        db.exec("DELETE FROM dead_mans_switches WHERE id = $1::bigint", {std::to_string(id)});
        done(true);
      },
      [id, done](const std::string& why) {
        spdlog::warn("ws: dead man's switch {} could not be switched off: {}", id, why);
        done(false);
      });
}

void DeadMansSwitches::fire(std::int64_t account, std::int64_t id) {
  spdlog::info("ws: dead man's switch: the connection of account {} ended; cancelling its open orders", account);
  ++pending_;
  cancel(account, {id});
}

void DeadMansSwitches::cancel(std::int64_t account, std::vector<std::int64_t> ids) {
  // The cancel-all deletes the switches' rows in its own transaction: done and disarmed together.
  runner_.submit(matching::AccountId{account}, matching::CancelAll{std::nullopt}, {},
                 [this, account, ids](const EngineRunner::Result& r) {
                   if (r.outcome == EngineRunner::Outcome::committed) {
                     std::size_t n = 0;
                     for (const auto& e : *r.events) n += std::holds_alternative<matching::OrderDone>(e);
                     spdlog::info("ws: dead man's switch cancelled {} orders of account {}", n, account);
                     --pending_;
                     return;
                   }
                   if (stopped_) {
                     spdlog::error("ws: dead man's switch of account {}: the store did not commit its cancel and the "
                                   "server is stopping; the next start cancels the account's orders",
                                   account);
                     --pending_;
                     return;
                   }
                   spdlog::error("ws: dead man's switch of account {}: the store did not commit its cancel; trying "
                                 "again in {} ms",
                                 account, retry_every_.count());
                   auto timer = std::make_shared<boost::asio::steady_timer>(timers_, retry_every_);
                   timer->async_wait([this, timer, account, ids](boost::system::error_code ec) {
                     if (ec || stopped_) {
                       --pending_;
                       return;
                     }
                     cancel(account, ids);
                   });
                 },
                 std::nullopt, ids);
}

std::size_t DeadMansSwitches::recover(store::PgConnection& db, std::chrono::milliseconds wait) {
  auto rows = db.exec("SELECT account_id, id FROM dead_mans_switches ORDER BY account_id, id");
  std::map<std::int64_t, std::vector<std::int64_t>> by_account;
  for (int i = 0; i < rows.rows(); ++i) by_account[rows.integer(i, 0)].push_back(rows.integer(i, 1));
  for (auto& [account, ids] : by_account) {
    spdlog::info("dead man's switch: account {} was armed when the last run ended; cancelling its open orders",
                 account);
    ++pending_;
    cancel(account, std::move(ids));
  }
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (pending_ > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (pending_ > 0) spdlog::warn("dead man's switch: {} cancels of the last run still pending", pending_.load());
  return by_account.size();
}

}  // namespace gpuex
