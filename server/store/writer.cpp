// See writer.hpp.
#include "server/store/writer.hpp"

#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <map>
#include <optional>

#include "server/sha256.hpp"
#include "server/store/command_codec.hpp"
#include "server/store/connection.hpp"
#include "server/wire.hpp"

namespace gpuex::store {

using namespace matching;
namespace json = boost::json;

namespace {

constexpr Statement kInsertCommand{"insert_command",
    "INSERT INTO engine_commands (seq, at, account_id, kind, body) VALUES ($1, $2, $3, $4, $5::jsonb)"};
constexpr Statement kUpsertOrder{"upsert_order", R"sql(
INSERT INTO orders (id, account_id, client_order_id, body_sha256, side, market, status, doc, created_at, updated_at)
VALUES ($1, $2, $3, $4::bytea, $5, $6, $7, $8::jsonb, $9, $10)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, doc = excluded.doc, updated_at = excluded.updated_at)sql"};
constexpr Statement kUpsertPool{"upsert_pool", R"sql(
INSERT INTO pools (id, provider_id, market, retired, doc) VALUES ($1, $2, $3, $4, $5::jsonb)
ON CONFLICT (id) DO UPDATE SET retired = excluded.retired, doc = excluded.doc, updated_at = now())sql"};
constexpr Statement kUpsertLease{"upsert_lease", R"sql(
INSERT INTO leases (id, buyer_id, provider_id, pool_id, market, status, lease) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, lease = excluded.lease, updated_at = now())sql"};
constexpr Statement kInsertTrade{"insert_trade", R"sql(
INSERT INTO trades (id, at, market, bucket, buy_order_id, sell_order_id, buyer_id, seller_id, pool_id, lease_id,
                    quantity, start_at, end_at, price_micros, list_price_micros, green_discount_bps, preemption,
                    taker_side, print, buyer_fill, seller_fill, tier, region, green_tier)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19::jsonb, $20::jsonb,
        $21::jsonb, $22, $23, $24))sql"};
constexpr Statement kSetHalted{"set_halted", "UPDATE markets SET halted = $2 WHERE id = $1"};
// A key already stored was checked before the command ran; DO NOTHING keeps a race from failing the batch.
constexpr Statement kInsertIdempotency{"insert_idempotency", R"sql(
INSERT INTO idempotency_keys (account_id, key, request_sha256, status, body) VALUES ($1, $2, $3::bytea, $4, $5)
ON CONFLICT DO NOTHING)sql"};
constexpr Statement kStatements[] = {kInsertCommand, kUpsertOrder, kUpsertPool,      kUpsertLease,
                                     kInsertTrade,   kSetHalted,   kInsertIdempotency};

std::string num(std::int64_t v) { return std::to_string(v); }
std::string boolean(bool b) { return b ? "true" : "false"; }

// The last state of each order, pool and lease a batch touched, so each row is written once.
struct Rows {
  std::map<OrderId, Order> orders;
  std::map<PoolId, Pool> pools;
  std::map<LeaseId, Lease> leases;
  std::vector<const Trade*> trades;
  std::vector<std::pair<MarketId, bool>> halts;

  std::size_t size() const { return orders.size() + pools.size() + leases.size() + trades.size() + halts.size(); }

  void add(const Event& event) {
    std::visit(
        [this](const auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, OrderAccepted> || std::is_same_v<E, OrderRejected> ||
                        std::is_same_v<E, OrderUpdated> || std::is_same_v<E, OrderDone>) {
            orders.insert_or_assign(e.order.id, e.order);
          } else if constexpr (std::is_same_v<E, PoolChanged>) {
            pools.insert_or_assign(e.pool.id, e.pool);
          } else if constexpr (std::is_same_v<E, LeaseChanged>) {
            leases.insert_or_assign(e.lease.id, e.lease);
          } else if constexpr (std::is_same_v<E, TradeEvent>) {
            trades.push_back(&e.trade);
          } else if constexpr (std::is_same_v<E, MarketHaltChanged>) {
            halts.emplace_back(e.market, e.halted);
          }
        },
        event);
  }
};

}  // namespace

std::string request_sha256(const OrderRequest& request) {
  return sha256_bytea(json::serialize(wire::order_request_body(request)));
}

Writer::Writer(std::string dsn, FailureListener on_failure) : dsn_(std::move(dsn)), on_failure_(std::move(on_failure)) {}

Writer::~Writer() { stop(); }

void Writer::start() { thread_ = std::thread([this] { run(); }); }

void Writer::submit(Batch batch) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(batch));
  }
  wake_.notify_one();
}

void Writer::reset() {
  std::lock_guard lock(mutex_);
  failed_ = false;
}

void Writer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Writer::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

Writer::Counters Writer::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void Writer::run() {
  std::optional<PgConnection> conn;
  std::uint64_t statements = 0;
  for (;;) {
    std::vector<Batch> batches;
    bool failed;
    {
      std::unique_lock lock(mutex_);
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything was written
      // Group commit: everything queued while the last transaction ran goes into the next one.
      while (!queue_.empty()) {
        batches.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      failed = failed_;
      busy_ = true;
    }
    if (failed) {
      fail(batches);
      continue;
    }
    try {
      if (!conn || !conn->healthy()) {
        conn = PgConnection::connect(dsn_, std::chrono::seconds(2));
        prepare(*conn, parts_);
      }
      Pipeline pipe(*conn);
      pipe.send("BEGIN");
      statements = write(pipe, batches, parts_);
      pipe.send("COMMIT");
      pipe.sync();
    } catch (const std::exception& e) {
      spdlog::error("store: a batch of {} commands did not commit: {}", batches.size(), e.what());
      conn.reset();  // a connection in an unknown state is not reused
      {
        std::lock_guard lock(mutex_);
        failed_ = true;
        ++counters_.failed_transactions;
      }
      fail(batches);
      on_failure_(e.what());
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      ++counters_.transactions;
      counters_.statements += statements;
      for (const auto& b : batches) counters_.commands += b.size();
    }
    commit(batches);
  }
}

void Writer::prepare(PgConnection& conn, const std::vector<TransactionPart*>& parts) {
  for (const auto& statement : kStatements) conn.prepare(statement);
  for (auto* part : parts) part->prepare(conn);
}

std::size_t Writer::write(Pipeline& pipe, const std::vector<Batch>& batches, const std::vector<TransactionPart*>& parts) {
  std::size_t statements = 0;
  for (const auto& batch : batches) {
    for (const auto& logged : batch) {
      const auto& cmd = logged.command;
      pipe.send(kInsertCommand, {num(cmd.seq), num(cmd.now.value), num(cmd.account.value),
                                 std::string(command_kind(cmd.body)), json::serialize(command_body_json(cmd.body))});
      Rows rows;
      for (const auto& e : logged.events) rows.add(e);
      statements += 1 + rows.size();
      for (const auto& [id, p] : rows.pools) {
        pipe.send(kUpsertPool, {num(id.value), num(p.provider.value), p.spec.market.value, boolean(p.retired),
                                json::serialize(wire::pool_json(p))});
      }
      for (const auto& [id, o] : rows.orders) {
        Param cid = o.request.client_order_id.empty() ? Param{} : Param{o.request.client_order_id};
        Param hash = o.request.client_order_id.empty() ? Param{} : Param{request_sha256(o.request)};
        pipe.send(kUpsertOrder, {num(id.value), num(o.account.value), cid, hash, std::string(to_string(o.request.side)),
                                 o.market.value, std::string(to_string(o.status)),
                                 json::serialize(wire::order_json(o)), num(o.created_at.value),
                                 num(o.updated_at.value)});
      }
      for (const Trade* t : rows.trades) {
        pipe.send(kInsertTrade,
                  {num(t->id.value), num(t->time.value), t->market.value, to_string(t->bucket), num(t->buy_order.value),
                   num(t->sell_order.value), num(t->buyer.value), num(t->seller.value), num(t->pool.value),
                   num(t->lease.value), num(t->quantity.value), num(t->start.value), num(t->end.value),
                   num(t->price.value), num(t->list_price.value), num(t->green_discount_bps), boolean(t->preemption),
                   std::string(to_string(t->taker)), json::serialize(wire::print_json(*t)),
                   json::serialize(wire::fill_json(*t, Side::buy)), json::serialize(wire::fill_json(*t, Side::sell)),
                   std::string(to_string(t->tier)), t->region, std::string(to_string(t->green_tier))});
      }
      for (const auto& [id, l] : rows.leases) {
        pipe.send(kUpsertLease, {num(id.value), num(l.buyer.value), num(l.provider.value), num(l.pool.value),
                                 l.market.value, std::string(to_string(l.status)),
                                 json::serialize(wire::lease_json(l, l.buyer))});
      }
      for (const auto& [market, halted] : rows.halts) pipe.send(kSetHalted, {market.value, boolean(halted)});
      if (const auto& idem = logged.idempotency) {
        pipe.send(kInsertIdempotency, {num(idem->account_id), idem->key, idem->request_sha256,
                                       num(idem->status), idem->body});
        ++statements;
      }
    }
  }  for (auto* part : parts) statements += part->write(pipe, batches);
  return statements;
}

void Writer::commit(std::vector<Batch>& batches) {
  for (const auto& batch : batches) {
    for (const auto& listener : listeners_) listener(batch);
    for (const auto& logged : batch) {
      if (logged.done) logged.done(&logged.events);
    }
  }
}

void Writer::fail(std::vector<Batch>& batches) {
  for (const auto& batch : batches) {
    for (const auto& logged : batch) {
      if (logged.done) logged.done(nullptr);
    }
  }
}

}  // namespace gpuex::store
