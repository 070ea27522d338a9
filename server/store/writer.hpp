// The store writer: commits the engine's commands and events in batches (one transaction per
// batch, libpq pipeline mode), then hands each committed batch to the listeners the server
// registered. It knows nothing of HTTP or WebSocket.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "matching/command.hpp"
#include "server/sha256.hpp"
#include "matching/event.hpp"

namespace gpuex::store {

// The answer to a request that carried an Idempotency-Key, stored with its command.
struct IdempotencyRecord {
  std::int64_t account_id = 0;
  std::string key;
  std::string request_sha256;  // "\\x..." bytea text
  unsigned status = 0;
  std::string body;
};

struct LoggedCommand {
  matching::Command command;
  matching::EventSink events;
  std::optional<IdempotencyRecord> idempotency;
  // Rows of `dead_mans_switches` this command carries out (its cancel-all): deleted in its transaction,
  // so a switch is never both done and still armed for the next start.
  std::vector<std::int64_t> fired_switches;
  // Called once on the writer's completion thread: with the events after COMMIT, or with nullptr
  // when the batch holding this command did not commit (the command never happened).
  std::function<void(const matching::EventSink*)> done;
};
using Batch = std::vector<LoggedCommand>;

// The stored hash of an order's request: a repeat of a client_order_id with the same hash is the same
// order. As raw bytes (the writer's binary parameters) and as "\\x..." (a text bytea parameter).
Sha256 request_digest(const matching::OrderRequest& request);
std::string request_sha256(const matching::OrderRequest& request);

class PgConnection;
class Pipeline;

// Rows a layer above the store adds to every batch's transaction (the analytics rollups), so they
// commit or fail with the trades they come from. Called on the writer thread.
class TransactionPart {
 public:
  virtual ~TransactionPart() = default;
  // Once per new connection, before its first transaction (prepare statements here).
  virtual void prepare(PgConnection& conn) = 0;
  // Before each transaction, on the writer's connection outside any transaction: a chance to read
  // committed rows the part keeps in memory (the writer is their only writer).
  virtual void before(PgConnection& /*conn*/, const std::vector<Batch>& /*batches*/) {}
  // Inside the transaction, after the batches' own rows: sends its statements, returns how many.
  virtual std::size_t write(Pipeline& pipe, const std::vector<Batch>& batches) = 0;
  // The transaction write() took part in did not commit: drop whatever it changed in memory.
  virtual void rolled_back() {}
};

class Writer {
 public:
  using Listener = std::function<void(const Batch&)>;
  using FailureListener = std::function<void(const std::string& why)>;

  // `max_batches_per_transaction` bounds group commit (the benchmark's PostgreSQL ceiling writes
  // transactions of a given size through the real writer with 1); the server takes everything queued.
  Writer(std::string dsn, FailureListener on_failure, std::size_t max_batches_per_transaction = SIZE_MAX);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // After-commit listeners, called in commit order on the writer's completion thread (register
  // before start). Listeners and `done` run there, not on the thread that writes, so the next
  // transaction is written while the last one's answers are made.
  void add_listener(Listener listener) { listeners_.push_back(std::move(listener)); }
  // Runs each ended transaction's listeners and `done` inside it, on the completion thread (set before
  // start): the server holds the answers they make and hands them to its I/O threads together.
  using CompletionScope = std::function<void(const std::function<void()>& complete)>;
  void set_completion_scope(CompletionScope scope) { completion_scope_ = std::move(scope); }
  // Parts of every transaction, in registration order (register before start; `part` outlives the writer's run).
  void add_transaction_part(TransactionPart& part) { parts_.push_back(&part); }
  // A transaction PostgreSQL sends nothing back for within this long fails (its outcome unknown: the
  // engine is rebuilt from what the store holds). Zero: wait for ever. Before start().
  void set_answer_timeout(std::chrono::milliseconds timeout) { answer_timeout_ = timeout; }
  // Before the engine reads the store again after a failure: the backend of the connection the failed
  // transaction was sent on must be gone, or that transaction may still commit behind the read (a
  // frozen server that resumes, a COMMIT whose answer was lost). Terminates it and waits; throws
  // StoreError while it lives on. Then the failed transaction's fate is known: if it did commit after
  // all, its batches go to the listeners now (on the calling thread; the writer is idle), so that what
  // the store holds is published as every commit is — its commands were answered as failed.
  void fence(PgConnection& db);
  void start();
  void submit(Batch batch);
  // Once a batch failed, every later one fails too until reset() (the engine was rebuilt).
  void reset();
  // Blocks until nothing is queued, being written or waiting for its listeners and `done`.
  void wait_idle();
  // Commits what is queued, then stops.
  void stop();
  // What has been committed so far, for /metrics and the benchmarks.
  struct Counters {
    std::uint64_t transactions = 0;
    std::uint64_t commands = 0;
    std::uint64_t statements = 0;  // rows written, BEGIN/COMMIT excluded
    std::uint64_t failed_transactions = 0;
  };
  Counters counters() const;

  // Prepares the statements write() sends (the parts' included) on a new connection.
  static void prepare(PgConnection& conn, const std::vector<TransactionPart*>& parts);
  // Sends the rows of one transaction holding `batches` (BEGIN and COMMIT are the caller's): one
  // statement per table, each row once in its last state, then the parts' statements. Returns the
  // rows written (the parts' statements counted as one each). The benchmark's PostgreSQL ceiling
  // writes through this too, so it always writes what the writer writes.
  static std::size_t write(Pipeline& pipe, const std::vector<Batch>& batches, const std::vector<TransactionPart*>& parts);

 private:
  void run();
  enum class Outcome { committed, failed, unknown };  // unknown: sent, and no answer to say how it ended
  void hand_off(std::vector<Batch> batches, Outcome outcome);
  void complete();  // the completion thread: listeners and `done`, in commit order
  void commit(std::vector<Batch>& batches);
  void fail(std::vector<Batch>& batches);

  std::string dsn_;
  FailureListener on_failure_;
  std::size_t max_batches_;
  std::chrono::milliseconds answer_timeout_{0};
  std::optional<int> abandoned_backend_;  // guarded by mutex_: see fence()
  std::vector<Listener> listeners_;
  CompletionScope completion_scope_;
  std::vector<TransactionPart*> parts_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Batch> queue_;
  bool stopping_ = false;
  bool failed_ = false;
  bool busy_ = false;
  std::condition_variable idle_;
  // Transactions that ended, waiting for their listeners and `done`.
  std::deque<std::pair<std::vector<Batch>, Outcome>> completions_;
  // The batches of the transaction that failed without an answer, kept for fence() (guarded by mutex_).
  std::vector<Batch> unknown_;
  std::condition_variable completion_wake_;
  bool completing_ = false;
  bool completer_stopping_ = false;
  std::thread completer_;
  Counters counters_;
  std::thread thread_;
};

}  // namespace gpuex::store
