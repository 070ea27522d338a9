// The engine thread (DESIGN.md §2): the single writer that owns every book. I/O threads hand it
// commands; it stamps each with the next sequence number and a time that never goes backwards,
// applies it, and passes the command with its events to the store writer. Callers hear the outcome
// only after the transaction holding the command has committed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <future>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "alloc/engine_heap.hpp"
#include "matching/engine.hpp"
#include "server/store/connection.hpp"
#include "server/store/writer.hpp"

namespace gpuex {

class EngineRunner {
 public:
  struct Options {
    std::string dsn;
    std::chrono::milliseconds tick_interval{1000};
    std::size_t max_batch = 2048;  // commands per batch handed to the writer
    // Called on the rebuilt engine after recover() (at start, and after a failed commit).
    std::function<void(const matching::Engine&)> on_rebuilt;
    // Commands between engine snapshots (0: none). A snapshot is the engine's state as of one command,
    // written to the store by its own thread once that command has committed; recovery restores the
    // latest one and replays only the commands after it.
    std::int64_t snapshot_every = 0;
    // A snapshot the store did not take (PostgreSQL away, a statement timeout) is tried again after this,
    // kSnapshotAttempts times in all, unless a newer one is taken meanwhile.
    std::chrono::milliseconds snapshot_retry{10'000};
    // The engine allocates from this heap (the engine thread, and recover() on whichever thread runs it); null:
    // from the allocating thread's own.
    const alloc::EngineHeap* heap = nullptr;
  };

  EngineRunner(matching::EngineConfig config, store::Writer& writer, Options options);
  ~EngineRunner();
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  struct Recovery {
    std::int64_t commands = 0;
    std::size_t pools = 0, open_orders = 0, leases = 0;
    matching::Seq last_seq = 0;
    std::uint64_t digest = 0;
    std::chrono::milliseconds took{0};
    matching::Seq snapshot_seq = 0;  // the snapshot restored (0: none, the whole log was replayed)
  };
  // Rebuilds the engine from the latest usable snapshot and the commands logged after it (before start()).
  Recovery recover(store::PgConnection& db);

  void start();
  // Logs a last tick (so a restart reaches the same time), waits for it to commit, and stops.
  void stop();

  enum class Outcome {
    committed,          // `events` are the command's, committed
    refused,            // `admit` said no
    store_unavailable,  // the batch did not commit, or writes are stopped
    replayed,           // an Idempotency-Key seen before with the same request: `stored` is its answer
    key_conflict,       // an Idempotency-Key seen before with another request
    key_in_flight,      // the first request with this Idempotency-Key has not committed yet
    stale_check,        // the store check of the key is too old to trust; check again
  };
  struct Answer {
    unsigned status = 0;
    std::string body;
  };
  struct Result {
    Outcome outcome;
    const matching::EventSink* events = nullptr;
    matching::Seq seq = 0;
    std::optional<Answer> stored;
  };
  using Done = std::function<void(const Result&)>;
  using Admit = std::function<bool(const matching::Engine&)>;

  // A request with an Idempotency-Key that the store did not know when `checked_at`.
  struct Idempotency {
    std::string key;
    std::string request_sha256;
    std::chrono::steady_clock::time_point checked_at;
    // The answer to store with the command (computed from its events on the engine thread).
    std::function<Answer(const matching::EventSink&, matching::Seq)> answer;
  };

  // On the engine thread: `admit` (may be empty) runs first with read-only access; if it returns
  // false, `done(refused)`. Otherwise the command is sequenced, applied and logged, and `done` hears
  // the events after commit, or store_unavailable if the batch did not commit. `fired_switches`: the
  // dead man's switches the command carries out, deleted in its transaction.
  void submit(matching::AccountId account, matching::CommandBody body, Admit admit, Done done,
              std::optional<Idempotency> idempotency = std::nullopt, std::vector<std::int64_t> fired_switches = {});
  // Runs `fn` on the engine thread with read-only access to the live engine.
  void read(std::function<void(const matching::Engine&)> fn);
  // The same for an answer that must show committed state only: `fn` reads the live engine and returns
  // what delivers its answer; that runs once every command the engine had applied has committed
  // (`true`), or with `false` when one of them did not (the engine is then rebuilt from the store).
  using Deliver = std::function<void(bool committed)>;
  void read_committed(std::function<Deliver(const matching::Engine&)> fn);

  bool accepting() const { return accepting_.load(); }
  // The writer calls this when a batch did not commit: writes stop until the engine is rebuilt.
  void store_failed();
  // Test clock (gpuexd serve --test-clock): moves server time forward.
  void advance_clock(std::int64_t seconds) { clock_offset_.fetch_add(seconds); }
  // Server time: the wall clock plus any test-clock advance, Unix seconds.
  std::int64_t server_time() const;
  // The same in milliseconds (the `ts` of WebSocket messages).
  std::int64_t server_time_ms() const;

 private:
  struct Submit {
    matching::AccountId account;
    matching::CommandBody body;
    Admit admit;
    Done done;
    std::optional<Idempotency> idempotency;
    std::vector<std::int64_t> fired_switches;
  };
  // Idempotency-Keys in flight or committed in the last seconds (older ones the store answers).
  struct KeyEntry {
    std::string request_sha256;
    std::optional<Answer> answer;
    std::optional<std::chrono::steady_clock::time_point> committed_at;
  };
  // Checks `s`'s key; answers and returns false when the request must not run.
  bool admit_key(Submit& s);
  struct Read {
    std::function<void(const matching::Engine&)> fn;
  };
  using Job = std::variant<Submit, Read>;

  void run();
  // The time to stamp the next command(s) with: server time, never before the previous stamp.
  std::int64_t stamp();
  void apply(matching::AccountId account, matching::CommandBody body, Done done, store::Batch& batch, std::int64_t now,
             std::optional<Idempotency> idempotency = std::nullopt, std::vector<std::int64_t> fired_switches = {});
  void rebuild();
  void forget_committed_ids();
  // The engine of the newest stored snapshot that reads back, fits the command log and has its digest.
  std::optional<matching::Engine> restore_snapshot(store::PgConnection& db);
  // Engine thread: takes a snapshot when options_.snapshot_every commands passed since the last one.
  void maybe_snapshot();
  void snapshot_loop();  // the snapshot thread
  // A snapshot waits whose commands all committed, or were rebuilt away (hold committed_mutex_).
  bool snapshot_ready() const;

  matching::EngineConfig config_;
  matching::Engine engine_;
  store::Writer& writer_;
  Options options_;
  matching::Seq next_seq_ = 1;
  std::int64_t last_now_ = 0;
  std::chrono::steady_clock::time_point rebuilt_at_{};  // engine thread: the last rebuild after a failed commit

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> rebuild_needed_{false};
  std::atomic<std::int64_t> clock_offset_{0};

  // Committed sequence numbers with their commit time: client_order_ids of terminal orders are
  // forgotten by the engine only some seconds after commit (see engine_runner.cpp).
  std::mutex committed_mutex_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, matching::Seq>> committed_;
  matching::Seq committed_seq_ = 0;                                  // the last command committed
  std::vector<std::pair<matching::Seq, Deliver>> waiting_reads_;      // read_committed answers
  void finish_reads(bool committed);  // delivers the waiting reads up to committed_seq_, or all as failed
  // While the engine waits to be rebuilt: writes are refused, reads see the engine as it is (committed
  // reads answer that nothing is certain).
  void answer_unrebuilt(std::deque<Job>& jobs);
  std::map<std::pair<std::int64_t, std::string>, KeyEntry> keys_;  // guarded by committed_mutex_

  // Snapshots. A state taken in one generation (recover() starts the next) is written only if the
  // store committed its last command in that same generation: after a failed commit the same seq
  // numbers are given to other commands.
  struct PendingSnapshot {
    matching::EngineState state;
    std::uint64_t generation = 0;
    int attempts = 0;  // writes tried and failed
  };
  matching::Seq snapshot_seq_ = 0;                    // engine thread: last snapshot taken or restored
  std::optional<PendingSnapshot> pending_snapshot_;   // guarded by committed_mutex_
  std::uint64_t generation_ = 0;                      // guarded by committed_mutex_
  bool snapshot_stop_ = false;                        // guarded by committed_mutex_
  std::condition_variable snapshot_wake_;             // with committed_mutex_
  std::thread snapshot_thread_;

  std::thread thread_;
};

}  // namespace gpuex
