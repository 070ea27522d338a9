// See writer.hpp.
#include "server/store/writer.hpp"

#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>
#include <optional>

#include "server/sha256.hpp"
#include "server/store/command_codec.hpp"
#include "server/store/connection.hpp"
#include "server/wire.hpp"

namespace gpuex::store {

using namespace matching;
namespace json = boost::json;

namespace {

// Each table a transaction writes gets one statement with an array per column (unnest), however
// many rows it holds: PostgreSQL plans and executes one statement instead of one per row.
constexpr Statement kInsertCommands{"insert_commands", R"sql(
INSERT INTO engine_commands (seq, at, account_id, kind, body)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[]))sql"};
// A transaction's new orders are inserted, the others updated: an order's first event says which, so
// neither pays for INSERT ... ON CONFLICT's speculative insertion and row lock.
constexpr Statement kInsertOrders{"insert_orders", R"sql(
INSERT INTO orders (id, account_id, client_order_id, body_sha256, side, market, status, doc, created_at, updated_at)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::text[],
                     $8::text[], $9::bigint[], $10::bigint[]))sql"};
// Prepared: its plan is one index lookup per row whatever the size of `orders` when it was planned, as
// the writer's session plans without sequential scans, hash joins or merge joins (kPlanByKey). Left
// to the planner, a generic plan made while `orders` was small (a fresh database) joined by a
// sequential scan and kept doing so as the table grew (4.8 ms per UPDATE of ~10 rows); planned
// afresh in every transaction instead (79edd66), parsing and planning it took ~6.5 % of the writer
// backend's samples.
// Every changed order has its row (an earlier batch inserted it): one missing fails the transaction
// (gpuex_expect_rows, migration 0011) instead of being skipped by the join.
constexpr Statement kUpdateOrders{"update_orders", R"sql(
WITH changed AS (
  UPDATE orders o SET status = u.status, doc = u.doc, updated_at = u.updated_at
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) AS u (id, status, doc, updated_at)
  WHERE o.id = u.id
  RETURNING o.id)
SELECT gpuex_expect_rows(count(*), cardinality($1::bigint[]), 'the UPDATE of changed orders') FROM changed)sql"};
// Every statement the writer runs, and every foreign-key check they fire, touches a few rows by key,
// so its session never scans a whole table or hashes one. A plan is made when a statement is first
// used and again whenever its table's statistics change: the orders' foreign-key checks on
// `accounts` were planned as a sequential scan of the whole table (cheaper by the planner's costs
// for a table of two pages) once autovacuum had analysed it, and reading ~130 accounts per order row
// took the checks from ~11 % to ~20 % of the writer backend's samples, depending on whether the
// analysis came before the writer's first transaction (a source of the runs' spread).
constexpr const char* kPlanByKey = "SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off";
constexpr Statement kUpsertPools{"upsert_pools", R"sql(
INSERT INTO pools (id, provider_id, market, retired, doc)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::boolean[], $5::jsonb[])
ON CONFLICT (id) DO UPDATE SET retired = excluded.retired, doc = excluded.doc, updated_at = now())sql"};
constexpr Statement kUpsertLeases{"upsert_leases", R"sql(
INSERT INTO leases (id, buyer_id, provider_id, pool_id, market, status, lease)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::jsonb[])
ON CONFLICT (id) DO UPDATE SET status = excluded.status, lease = excluded.lease, updated_at = now())sql"};
constexpr Statement kInsertTrades{"insert_trades", R"sql(
INSERT INTO trades (id, at, market, bucket, buy_order_id, sell_order_id, buyer_id, seller_id, pool_id, lease_id,
                    quantity, start_at, end_at, price_micros, list_price_micros, green_discount_bps, preemption,
                    taker_side, print, buyer_fill, seller_fill, tier, region, green_tier)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[],
                     $8::bigint[], $9::bigint[], $10::bigint[], $11::integer[], $12::bigint[], $13::bigint[],
                     $14::bigint[], $15::bigint[], $16::integer[], $17::boolean[], $18::text[], $19::text[],
                     $20::text[], $21::text[], $22::text[], $23::text[], $24::text[]))sql"};
constexpr Statement kSetHalted{"set_halted", "UPDATE markets SET halted = $2 WHERE id = $1"};
// A key already stored was checked before the command ran; DO NOTHING keeps a race from failing the batch.
constexpr Statement kInsertIdempotency{"insert_idempotency", R"sql(
INSERT INTO idempotency_keys (account_id, key, request_sha256, status, body) VALUES ($1, $2, $3::bytea, $4, $5)
ON CONFLICT DO NOTHING)sql"};
constexpr Statement kDeleteSwitches{"delete_switches", "DELETE FROM dead_mans_switches WHERE id = ANY($1::bigint[])"};
constexpr Statement kStatements[] = {kInsertCommands, kInsertOrders, kUpdateOrders,      kUpsertPools,   kUpsertLeases,
                                     kInsertTrades,   kSetHalted,    kInsertIdempotency, kDeleteSwitches};

std::string num(std::int64_t v) { return std::to_string(v); }
std::string boolean(bool b) { return b ? "true" : "false"; }

// The last state of each order, pool and lease a transaction touched, so each row is written once
// (an INSERT ... ON CONFLICT DO UPDATE may not touch a row twice).
struct Rows {
  std::map<OrderId, const Order*> orders;
  std::set<OrderId> new_orders;  // accepted or rejected in this transaction: not in the table yet
  std::map<PoolId, const Pool*> pools;
  std::map<LeaseId, const Lease*> leases;
  std::vector<const Trade*> trades;
  std::vector<std::pair<MarketId, bool>> halts;

  void add(const Event& event) {
    std::visit(
        [this](const auto& e) {
          using E = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<E, OrderAccepted> || std::is_same_v<E, OrderRejected> ||
                        std::is_same_v<E, OrderUpdated> || std::is_same_v<E, OrderDone>) {
            orders.insert_or_assign(e.order.id, &e.order);
            if constexpr (std::is_same_v<E, OrderAccepted> || std::is_same_v<E, OrderRejected>) new_orders.insert(e.order.id);
          } else if constexpr (std::is_same_v<E, PoolChanged>) {
            pools.insert_or_assign(e.pool.id, &e.pool);
          } else if constexpr (std::is_same_v<E, LeaseChanged>) {
            leases.insert_or_assign(e.lease.id, &e.lease);
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

Sha256 request_digest(const OrderRequest& request) { return sha256(json::serialize(wire::order_request_body(request))); }

std::string request_sha256(const OrderRequest& request) {
  const Sha256 digest = request_digest(request);
  return "\\x" + to_hex(digest.data(), digest.size());
}

Writer::Writer(std::string dsn, FailureListener on_failure, std::size_t max_batches_per_transaction)
    : dsn_(std::move(dsn)), on_failure_(std::move(on_failure)), max_batches_(std::max<std::size_t>(1, max_batches_per_transaction)) {}

Writer::~Writer() { stop(); }

void Writer::start() {
  completer_ = std::thread([this] { complete(); });
  thread_ = std::thread([this] { run(); });
}

void Writer::submit(Batch batch) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(batch));
  }
  wake_.notify_one();
}

void Writer::fence(PgConnection& db) {
  std::optional<int> pid;
  std::optional<matching::Seq> unknown_from;  // the first command of the transaction that failed without an answer
  {
    std::lock_guard lock(mutex_);
    pid = abandoned_backend_;
    for (const auto& b : unknown_) {
      if (!b.empty()) {
        unknown_from = b.front().command.seq;
        break;
      }
    }
  }
  if (pid) {
    const std::string p = std::to_string(*pid);
    // pg_terminate_backend(pid, timeout) waits up to the timeout for the backend to exit.
    auto r = db.exec("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid = $1::integer", {p});
    if (r.rows() > 0 && r.text(0, 0) != std::string("t")) {
      throw StoreError("the backend (pid " + p + ") of the failed transaction is still running; it may yet commit");
    }
    if (r.rows() > 0) spdlog::info("store: terminated the backend (pid {}) of the failed transaction", p);
  }
  // Its fate is settled now. A transaction commits whole, and nothing was written after it (every later
  // batch failed unsent): one of its commands in the log means it committed.
  const bool committed =
      unknown_from &&
      db.exec("SELECT count(*) FROM engine_commands WHERE seq = $1::bigint", {std::to_string(*unknown_from)})
              .integer(0, 0) > 0;
  std::vector<Batch> unknown;
  {
    std::lock_guard lock(mutex_);
    abandoned_backend_.reset();
    unknown.swap(unknown_);
  }
  if (!committed) return;
  spdlog::warn("store: the failed transaction (from seq {}) had committed: publishing its events now; its commands "
               "were answered as failed, and a retry with the same client_order_id or Idempotency-Key finds them",
               *unknown_from);
  for (const auto& batch : unknown) {
    for (const auto& listener : listeners_) listener(batch);
  }
}

void Writer::reset() {
  std::lock_guard lock(mutex_);
  failed_ = false;
  unknown_.clear();  // (fence() took them; the engine, rebuilt, reuses their seqs)
}

void Writer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The writer has handed over its last transaction; the completion thread drains and stops.
  {
    std::lock_guard lock(mutex_);
    completer_stopping_ = true;
  }
  completion_wake_.notify_all();
  if (completer_.joinable()) completer_.join();
}

void Writer::wait_idle() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !busy_ && completions_.empty() && !completing_; });
}

Writer::Counters Writer::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void Writer::run() {
  std::optional<PgConnection> conn;
  int backend_pid = 0;  // conn's
  auto last_used = std::chrono::steady_clock::now();  // conn's last batch
  std::uint64_t statements = 0;
  for (;;) {
    std::vector<Batch> batches;
    bool failed;
    {
      std::unique_lock lock(mutex_);
      busy_ = false;
      idle_.notify_all();
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything was written
      // Group commit: everything queued while the last transaction ran goes into the next one.
      while (!queue_.empty() && batches.size() < max_batches_) {
        batches.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      failed = failed_;
      busy_ = true;
    }
    if (failed) {
      hand_off(std::move(batches), Outcome::failed);
      continue;
    }
    try {
      // A connection idle for a while may have lost its backend (PostgreSQL restarted): reading what
      // arrived meanwhile (the backend's goodbye, then the end of the stream) tells, so that a new
      // connection is made before the batch instead of the batch failing on the old one.
      if (conn && std::chrono::steady_clock::now() - last_used > std::chrono::seconds(1)) {
        if (PQconsumeInput(conn->raw()) == 1) PQconsumeInput(conn->raw());  // the goodbye, then the end
      }
      last_used = std::chrono::steady_clock::now();
      if (!conn || !conn->healthy()) {
        conn = PgConnection::connect(dsn_, std::chrono::seconds(2), "gpuexd writer");
        // Kept now: libpq forgets the pid once the connection is lost, and fence() must end that
        // backend even then (it may still be running a pipeline that holds COMMIT).
        backend_pid = conn->backend_pid();
        prepare(*conn, parts_);
      }
      for (auto* part : parts_) part->before(*conn, batches);
      Pipeline pipe(*conn, answer_timeout_);
      pipe.send("BEGIN");
      statements = write(pipe, batches, parts_);
      pipe.send("COMMIT");
      pipe.sync();
    } catch (const std::exception& e) {
      spdlog::error("store: a batch of {} commands did not commit: {}", batches.size(), e.what());
      if (conn && backend_pid > 0) {
        std::lock_guard lock(mutex_);
        abandoned_backend_ = backend_pid;
      }
      conn.reset();  // a connection in an unknown state is not reused
      for (auto* part : parts_) part->rolled_back();
      {
        std::lock_guard lock(mutex_);
        failed_ = true;
        ++counters_.failed_transactions;
      }
      // PostgreSQL may have committed it all the same (an answer lost, a timeout): fence() finds out.
      hand_off(std::move(batches), Outcome::unknown);
      on_failure_(e.what());
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      ++counters_.transactions;
      counters_.statements += statements;
      for (const auto& b : batches) counters_.commands += b.size();
    }
    hand_off(std::move(batches), Outcome::committed);
  }
}

void Writer::hand_off(std::vector<Batch> batches, Outcome outcome) {
  {
    std::lock_guard lock(mutex_);
    completions_.emplace_back(std::move(batches), outcome);
  }
  completion_wake_.notify_one();
}

void Writer::complete() {
  for (;;) {
    std::pair<std::vector<Batch>, Outcome> next;
    {
      std::unique_lock lock(mutex_);
      completing_ = false;
      idle_.notify_all();
      completion_wake_.wait(lock, [this] { return completer_stopping_ || !completions_.empty(); });
      if (completions_.empty()) return;  // stopping, and everything was answered
      next = std::move(completions_.front());
      completions_.pop_front();
      completing_ = true;
    }
    const auto run = [this, &next] {
      if (next.second == Outcome::committed) commit(next.first);
      else fail(next.first);
    };
    if (completion_scope_) completion_scope_(run);
    else run();
    if (next.second == Outcome::committed) continue;
    if (next.second == Outcome::unknown && !next.first.empty()) {
      std::lock_guard lock(mutex_);
      unknown_ = std::move(next.first);
    }
  }
}

void Writer::prepare(PgConnection& conn, const std::vector<TransactionPart*>& parts) {
  conn.exec_script(kPlanByKey);
  for (const auto& statement : kStatements) conn.prepare(statement);
  for (auto* part : parts) part->prepare(conn);
}

std::size_t Writer::write(Pipeline& pipe, const std::vector<Batch>& batches, const std::vector<TransactionPart*>& parts) {
  using T = BinaryArray::Type;
  Rows rows;
  BinaryArray c_seq(T::int8), c_at(T::int8), c_account(T::int8), c_kind(T::text), c_body(T::text);
  std::size_t written = 0;
  std::vector<const IdempotencyRecord*> keys;
  BinaryArray fired(T::int8);
  for (const auto& batch : batches) {
    for (const auto& logged : batch) {
      const auto& cmd = logged.command;
      c_seq.add(cmd.seq), c_at.add(cmd.now.value), c_account.add(cmd.account.value);
      c_kind.add(command_kind(cmd.body)), c_body.add(json::serialize(command_body_json(cmd.body)));
      ++written;
      for (const auto& e : logged.events) rows.add(e);
      if (logged.idempotency) keys.push_back(&*logged.idempotency);
      for (auto id : logged.fired_switches) fired.add(id);
    }
  }
  if (written == 0) return 0;
  pipe.send(kInsertCommands, {&c_seq, &c_at, &c_account, &c_kind, &c_body});
  if (!rows.pools.empty()) {
    BinaryArray id(T::int8), provider(T::int8), market(T::text), retired(T::boolean), doc(T::jsonb);
    for (const auto& [pid, p] : rows.pools) {
      id.add(pid.value), provider.add(p->provider.value), market.add(p->spec.market.value()), retired.add(p->retired);
      doc.add(json::serialize(wire::pool_json(*p, p->updated_at)));
    }
    pipe.send(kUpsertPools, {&id, &provider, &market, &retired, &doc});
    written += rows.pools.size();
  }
  if (!rows.orders.empty()) {
    BinaryArray id(T::int8), account(T::int8), cid(T::text), hash(T::bytea), side(T::text), market(T::text),
        status(T::text), doc(T::text), created(T::int8), updated(T::int8);
    BinaryArray u_id(T::int8), u_status(T::text), u_doc(T::text), u_updated(T::int8);
    for (const auto& [oid, o] : rows.orders) {
      if (!rows.new_orders.count(oid)) {
        u_id.add(oid.value), u_status.add(to_string(o->status)), u_doc.add(json::serialize(wire::order_json(*o)));
        u_updated.add(o->updated_at.value);
        continue;
      }
      id.add(oid.value), account.add(o->account.value);
      if (o->request.client_order_id.empty()) {
        cid.add_null(), hash.add_null();
      } else {
        const Sha256 digest = request_digest(o->request);
        cid.add(o->request.client_order_id);
        hash.add(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
      }
      side.add(to_string(o->request.side)), market.add(o->market.value()), status.add(to_string(o->status));
      doc.add(json::serialize(wire::order_json(*o))), created.add(o->created_at.value), updated.add(o->updated_at.value);
    }
    if (!rows.new_orders.empty()) {
      pipe.send(kInsertOrders, {&id, &account, &cid, &hash, &side, &market, &status, &doc, &created, &updated});
    }
    if (rows.new_orders.size() < rows.orders.size()) {
      pipe.send(kUpdateOrders, {&u_id, &u_status, &u_doc, &u_updated});
    }
    written += rows.orders.size();
  }
  if (!rows.trades.empty()) {
    std::vector<BinaryArray> c;
    for (T type : {T::int8, T::int8, T::text, T::text, T::int8, T::int8, T::int8, T::int8, T::int8, T::int8, T::int4,
                   T::int8, T::int8, T::int8, T::int8, T::int4, T::boolean, T::text, T::text, T::text, T::text, T::text,
                   T::text, T::text}) {
      c.emplace_back(type);
    }
    for (const Trade* t : rows.trades) {
      c[0].add(t->id.value), c[1].add(t->time.value), c[2].add(t->market.value()), c[3].add(to_string(t->bucket));
      c[4].add(t->buy_order.value), c[5].add(t->sell_order.value), c[6].add(t->buyer.value), c[7].add(t->seller.value);
      c[8].add(t->pool.value), c[9].add(t->lease.value), c[10].add(t->quantity.value), c[11].add(t->start.value);
      c[12].add(t->end.value), c[13].add(t->price.value), c[14].add(t->list_price.value);
      c[15].add(t->green_discount_bps), c[16].add(t->preemption), c[17].add(to_string(t->taker));
      c[18].add(json::serialize(wire::print_json(*t))), c[19].add(json::serialize(wire::fill_json(*t, Side::buy)));
      c[20].add(json::serialize(wire::fill_json(*t, Side::sell))), c[21].add(to_string(t->tier)), c[22].add(t->region);
      c[23].add(to_string(t->green_tier));
    }
    std::vector<BinaryArray*> params;
    for (auto& a : c) params.push_back(&a);
    pipe.send(kInsertTrades, params);
    written += rows.trades.size();
  }
  if (!rows.leases.empty()) {
    BinaryArray id(T::int8), buyer(T::int8), provider(T::int8), pool(T::int8), market(T::text), status(T::text),
        doc(T::jsonb);
    for (const auto& [lid, l] : rows.leases) {
      id.add(lid.value), buyer.add(l->buyer.value), provider.add(l->provider.value), pool.add(l->pool.value);
      market.add(l->market.value()), status.add(to_string(l->status)), doc.add(json::serialize(wire::lease_json(*l, l->buyer)));
    }
    pipe.send(kUpsertLeases, {&id, &buyer, &provider, &pool, &market, &status, &doc});
    written += rows.leases.size();
  }
  for (const auto& [market, halted] : rows.halts) pipe.send(kSetHalted, {std::string(market.value()), boolean(halted)});
  written += rows.halts.size();
  for (const auto* idem : keys) {
    pipe.send(kInsertIdempotency, {num(idem->account_id), idem->key, idem->request_sha256, num(idem->status), idem->body});
  }
  written += keys.size();
  if (fired.size() > 0) {
    pipe.send(kDeleteSwitches, {&fired});
    written += fired.size();
  }
  for (auto* part : parts) written += part->write(pipe, batches);
  return written;
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
