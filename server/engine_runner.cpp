// See engine_runner.hpp.
#include "server/engine_runner.hpp"

#include <boost/json/parse.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "server/store/command_codec.hpp"
#include "server/store/snapshots.hpp"

namespace gpuex {

using namespace matching;
using SteadyClock = std::chrono::steady_clock;

namespace {
constexpr const char* kSelectCommands =
    "SELECT seq, at, account_id, kind, body::text FROM engine_commands WHERE seq > $1 ORDER BY seq LIMIT 10000";

// The engine remembers client_order_ids of ended orders this long after their commit. A repeat that
// arrives later is answered from the store, whose check must therefore have started after that commit;
// orders.cpp refuses a check older than half this (see kMaxCheckAge there).
constexpr auto kRememberEndedIds = std::chrono::seconds(10);
constexpr int kSnapshotAttempts = 3;  // writes of one snapshot before it is given up for the next one
}  // namespace

EngineRunner::EngineRunner(EngineConfig config, store::Writer& writer, Options options)
    : config_(config), engine_(std::move(config)), writer_(writer), options_(std::move(options)) {
  writer_.add_listener([this](const store::Batch& batch) {
    if (batch.empty()) return;
    bool wake_snapshot;
    {
      std::lock_guard lock(committed_mutex_);
      committed_.emplace_back(SteadyClock::now(), batch.back().command.seq);
      committed_seq_ = batch.back().command.seq;
      wake_snapshot = snapshot_ready();
    }
    // Only when this commit lets a snapshot be written: woken for every batch, the snapshot thread found
    // nothing to do nearly every time, at a futex wake and two context switches per engine turn.
    if (wake_snapshot) snapshot_wake_.notify_one();
    finish_reads(true);
  });
}

void EngineRunner::finish_reads(bool committed) {
  std::vector<Deliver> ready;
  {
    std::lock_guard lock(committed_mutex_);
    std::erase_if(waiting_reads_, [&](auto& w) {
      if (committed && w.first > committed_seq_) return false;
      ready.push_back(std::move(w.second));
      return true;
    });
  }
  for (auto& deliver : ready) deliver(committed);
}

void EngineRunner::read_committed(std::function<Deliver(const Engine&)> fn) {
  read([this, fn = std::move(fn)](const Engine& engine) {
    Deliver deliver = fn(engine);
    const Seq applied = next_seq_ - 1;
    {
      std::lock_guard lock(committed_mutex_);
      // A failed commit fails the waiting reads (store_failed); until the rebuild nothing is certain.
      if (!rebuild_needed_ && committed_seq_ < applied) {
        waiting_reads_.emplace_back(applied, std::move(deliver));
        return;
      }
    }
    deliver(!rebuild_needed_);
  });
}

EngineRunner::~EngineRunner() { stop(); }

std::int64_t EngineRunner::server_time() const {
  auto wall = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  return wall.count() + clock_offset_.load();
}

std::int64_t EngineRunner::server_time_ms() const {
  auto wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
  return wall.count() + clock_offset_.load() * 1000;
}

std::optional<Engine> EngineRunner::restore_snapshot(store::PgConnection& db) {
  const Seq logged = db.exec("SELECT coalesce(max(seq), 0) FROM engine_commands").integer(0, 0);
  const auto started = SteadyClock::now();
  auto since = [&started] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started).count();
  };
  for (const auto& stored : store::list_snapshots(db)) {
    try {
      if (stored.format != store::kSnapshotFormat) {
        throw store::StoreError("its format is " + std::to_string(stored.format) + ", this gpuexd reads " +
                                std::to_string(store::kSnapshotFormat));
      }
      if (stored.seq > logged) throw store::StoreError("the command log ends before it, at seq " + std::to_string(logged));
      EngineState state = [&] {  // the 100 MB row is freed once parsed
        const store::PgResult row = store::snapshot_state(db, stored.seq);
        const std::string_view text = row.text(0, 0);
        spdlog::info("recovery: snapshot of seq {} ({} MB) read in {} ms", stored.seq, text.size() >> 20, since());
        return store::snapshot_from_json(text);
      }();
      if (state.last_seq != stored.seq) throw store::StoreError("its state is of seq " + std::to_string(state.last_seq));
      const std::uint64_t digest = Engine::digest(state);
      if (fmt::format("{:016x}", digest) != stored.digest) throw store::StoreError("its state does not have its digest");
      spdlog::info("recovery: snapshot of seq {} parsed and checked in {} ms", stored.seq, since());
      const alloc::HeapBinding bound(options_.heap);
      return Engine::restore(config_, state);
    } catch (const std::exception& e) {
      spdlog::warn("recovery: not using the snapshot at seq {}: {}", stored.seq, e.what());
    }
  }
  return std::nullopt;
}

EngineRunner::Recovery EngineRunner::recover(store::PgConnection& db) {
  auto started = SteadyClock::now();
  Recovery r;
  std::optional<Engine> restored = restore_snapshot(db);
  const alloc::HeapBinding bound(options_.heap);  // the engine's state, not the snapshot's parse (freed)
  Engine engine = restored ? std::move(*restored) : Engine(config_);
  Seq last = engine.last_seq();
  if (restored) {
    r.snapshot_seq = last;
    last_now_ = std::max(last_now_, engine.now().value);
  }
  snapshot_seq_ = last;
  EventSink discard;
  for (;;) {
    auto rows = db.exec(kSelectCommands, {std::to_string(last)});
    if (rows.rows() == 0) break;
    for (int i = 0; i < rows.rows(); ++i) {
      Command cmd;
      cmd.seq = rows.integer(i, 0);
      cmd.now = Seconds(rows.integer(i, 1));
      cmd.account = AccountId(rows.integer(i, 2));
      auto body = boost::json::parse(rows.text(i, 4));
      if (!body.is_object()) throw store::StoreError("command log: body of seq " + std::to_string(cmd.seq) + " is not an object");
      cmd.body = store::command_body_from_json(rows.text(i, 3), body.as_object());
      discard.clear();
      engine.apply(cmd, discard);
      last = cmd.seq;
      last_now_ = std::max(last_now_, cmd.now.value);
      ++r.commands;
    }
  }
  engine_ = std::move(engine);
  next_seq_ = last + 1;
  {
    std::lock_guard lock(committed_mutex_);
    committed_seq_ = last;
    ++generation_;  // a snapshot still waiting was taken of commands that may not exist any more
  }
  snapshot_wake_.notify_one();
  const EngineState state = engine_.snapshot();
  r.pools = state.pools.size();
  r.open_orders = state.open_orders.size();
  r.leases = state.leases.size();
  r.last_seq = engine_.last_seq();
  r.digest = Engine::digest(state);
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started);
  if (options_.on_rebuilt) options_.on_rebuilt(engine_);
  return r;
}

void EngineRunner::start() {
  thread_ = std::thread([this] { run(); });
  if (options_.snapshot_every > 0) snapshot_thread_ = std::thread([this] { snapshot_loop(); });
}

void EngineRunner::maybe_snapshot() {
  // Only right after a logged command: a tick that changed nothing was applied under the next seq,
  // which the next command will carry too.
  const Seq applied = next_seq_ - 1;
  if (options_.snapshot_every <= 0 || engine_.last_seq() != applied || applied - snapshot_seq_ < options_.snapshot_every)
    return;
  auto started = SteadyClock::now();
  PendingSnapshot p{engine_.snapshot(), 0};  // the digest is computed by the snapshot thread
  snapshot_seq_ = p.state.last_seq;
  spdlog::info("engine: snapshot of seq {} taken in {} ms ({} open orders); written once committed",
               p.state.last_seq, std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started).count(),
               p.state.open_orders.size());
  {
    std::lock_guard lock(committed_mutex_);
    p.generation = generation_;
    pending_snapshot_ = std::move(p);  // replaces one not written yet: the newer includes it
  }
  snapshot_wake_.notify_one();
}

bool EngineRunner::snapshot_ready() const {
  return pending_snapshot_ &&
         (pending_snapshot_->generation != generation_ || committed_seq_ >= pending_snapshot_->state.last_seq);
}

void EngineRunner::snapshot_loop() {
  std::optional<store::PgConnection> db;
  for (;;) {
    PendingSnapshot p;
    {
      std::unique_lock lock(committed_mutex_);
      snapshot_wake_.wait(lock, [this] { return snapshot_stop_ || snapshot_ready(); });
      if (!snapshot_ready()) return;  // stopping, and nothing committed to write
      p = std::move(*pending_snapshot_);
      pending_snapshot_.reset();
      if (p.generation != generation_) continue;  // its commands did not commit; the engine was rebuilt
    }
    auto started = SteadyClock::now();
    try {
      if (!db || !db->healthy()) {
        db.emplace(store::PgConnection::connect(options_.dsn, std::chrono::seconds(2)));
        db->exec_script("SET statement_timeout = '120s'");  // stop() waits for this thread: never forever
      }
      store::save_snapshot(*db, p.state, Engine::digest(p.state));
      spdlog::info("engine: snapshot of seq {} written in {} ms", p.state.last_seq,
                   std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started).count());
    } catch (const std::exception& e) {
      db.reset();
      const matching::Seq seq = p.state.last_seq;
      std::unique_lock lock(committed_mutex_);
      // Tried again later unless stopping, superseded by a newer one, or its commands were rebuilt away.
      const bool again = ++p.attempts < kSnapshotAttempts && !snapshot_stop_ && !pending_snapshot_ &&
                         p.generation == generation_;
      spdlog::warn("engine: snapshot of seq {} not written ({}); {}", seq, e.what(),
                   again ? fmt::format("trying again in {} ms", options_.snapshot_retry.count())
                         : std::string("recovery replays from the one before"));
      if (again) {
        pending_snapshot_ = std::move(p);
        snapshot_wake_.wait_for(lock, options_.snapshot_retry, [this] { return snapshot_stop_; });
      }
    }
  }
}

void EngineRunner::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  finish_reads(false);  // whatever the last commits did not answer
  if (snapshot_thread_.joinable()) {
    {
      std::lock_guard lock(committed_mutex_);
      snapshot_stop_ = true;
    }
    snapshot_wake_.notify_all();
    snapshot_thread_.join();  // after writing a snapshot whose commands all committed
  }
}

void EngineRunner::submit(AccountId account, CommandBody body, Admit admit, Done done,
                          std::optional<Idempotency> idempotency, std::vector<std::int64_t> fired_switches) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(Submit{account, std::move(body), std::move(admit), std::move(done), std::move(idempotency),
                           std::move(fired_switches)});
  }
  wake_.notify_one();
}

void EngineRunner::read(std::function<void(const Engine&)> fn) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(Read{std::move(fn)});
  }
  wake_.notify_one();
}

std::int64_t EngineRunner::stamp() {
  // A time that never goes backwards: the later of the clock and the previous stamp.
  last_now_ = std::max(last_now_, server_time());
  return last_now_;
}

void EngineRunner::apply(AccountId account, CommandBody body, Done done, store::Batch& batch, std::int64_t now,
                         std::optional<Idempotency> idempotency, std::vector<std::int64_t> fired_switches) {
  const bool is_tick = std::holds_alternative<Tick>(body);
  Command cmd{next_seq_, Seconds(now), account, std::move(body)};
  EventSink events;
  engine_.apply(cmd, events);
  // A tick that changed nothing is not sequenced (DESIGN.md §2).
  if (is_tick && events.empty() && !done) return;
  ++next_seq_;
  Seq seq = cmd.seq;
  std::optional<store::IdempotencyRecord> record;
  std::optional<std::pair<std::int64_t, std::string>> key;
  if (idempotency) {
    Answer answer = idempotency->answer(events, seq);
    key.emplace(account.value, idempotency->key);
    record = store::IdempotencyRecord{account.value, idempotency->key, idempotency->request_sha256, answer.status,
                                      answer.body};
    std::lock_guard lock(committed_mutex_);
    keys_[*key] = KeyEntry{idempotency->request_sha256, std::move(answer), std::nullopt};
  }
  auto on_done = [this, done = std::move(done), seq, key](const EventSink* committed) {
    if (key) {
      std::lock_guard lock(committed_mutex_);
      if (committed) keys_[*key].committed_at = SteadyClock::now();
      else keys_.erase(*key);  // it never happened
    }
    if (done) done(Result{committed ? Outcome::committed : Outcome::store_unavailable, committed, seq, std::nullopt});
  };
  batch.push_back(store::LoggedCommand{std::move(cmd), std::move(events), std::move(record), std::move(fired_switches),
                                      std::move(on_done)});
}

bool EngineRunner::admit_key(Submit& s) {
  auto reply = [&s](Outcome outcome, std::optional<Answer> stored = std::nullopt) {
    if (s.done) s.done(Result{outcome, nullptr, 0, std::move(stored)});
    return false;
  };
  // A store check older than this may have missed a key committed and forgotten here since.
  if (SteadyClock::now() - s.idempotency->checked_at > kRememberEndedIds / 2 || s.idempotency->checked_at < rebuilt_at_) {
    return reply(Outcome::stale_check);
  }
  std::lock_guard lock(committed_mutex_);
  auto it = keys_.find({s.account.value, s.idempotency->key});
  if (it == keys_.end()) return true;
  if (it->second.request_sha256 != s.idempotency->request_sha256) return reply(Outcome::key_conflict);
  if (!it->second.committed_at) return reply(Outcome::key_in_flight);
  return reply(Outcome::replayed, it->second.answer);
}

void EngineRunner::forget_committed_ids() {
  Seq through = 0;
  auto horizon = SteadyClock::now() - kRememberEndedIds;
  {
    std::lock_guard lock(committed_mutex_);
    while (!committed_.empty() && committed_.front().first < horizon) {
      through = committed_.front().second;
      committed_.pop_front();
    }
  }
  if (through > 0) engine_.committed_through(through);
  std::lock_guard lock(committed_mutex_);
  std::erase_if(keys_, [horizon](const auto& kv) { return kv.second.committed_at && *kv.second.committed_at < horizon; });
}

void EngineRunner::store_failed() {
  accepting_ = false;
  rebuild_needed_ = true;
  finish_reads(false);
  wake_.notify_all();
}

void EngineRunner::rebuild() {
  // Everything the engine did since the last commit may be lost: start again from what PostgreSQL
  // holds, once it answers, after the writer has failed every batch still queued.
  writer_.wait_idle();
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    try {
      auto db = store::PgConnection::connect(options_.dsn, std::chrono::seconds(2));
      writer_.fence(db);
      auto r = recover(db);
      writer_.reset();
      // Idempotency-Key checks made before now may have missed a key whose commit failed to answer.
      rebuilt_at_ = SteadyClock::now();
      rebuild_needed_ = false;
      accepting_ = true;
      spdlog::info("engine: rebuilt from PostgreSQL after a failed commit ({} commands, {} ms); taking writes again",
                   r.commands, r.took.count());
      return;
    } catch (const std::exception& e) {
      if (attempt == 0) spdlog::warn("engine: waiting for PostgreSQL to rebuild: {}", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      // Whatever came meanwhile is answered now rather than when the store returns.
      std::deque<Job> jobs;
      {
        std::lock_guard lock(mutex_);
        jobs.swap(jobs_);
      }
      answer_unrebuilt(jobs);
    }
  }
}

void EngineRunner::answer_unrebuilt(std::deque<Job>& jobs) {
  for (auto& job : jobs) {
    if (auto* s = std::get_if<Submit>(&job)) {
      if (s->done) s->done(Result{Outcome::store_unavailable, nullptr, 0, std::nullopt});
    } else {
      std::get<Read>(job).fn(engine_);  // a committed read answers store_unavailable (rebuild_needed_)
    }
  }
}

void EngineRunner::run() {
  const alloc::HeapBinding bound(options_.heap);
  auto next_tick = SteadyClock::now() + options_.tick_interval;
  for (;;) {
    std::deque<Job> jobs;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_until(lock, next_tick, [this] { return stopping_ || !jobs_.empty() || rebuild_needed_; });
      stopping = stopping_;
      // The whole queue in one swap, so I/O threads waiting to queue a command are let go at once;
      // past max_batch (rare: a burst while a batch was applied) the oldest max_batch are moved out.
      if (stopping_ || jobs_.size() <= options_.max_batch) {
        jobs.swap(jobs_);
      } else {
        auto end = jobs_.begin() + static_cast<std::ptrdiff_t>(options_.max_batch);
        jobs.assign(std::make_move_iterator(jobs_.begin()), std::make_move_iterator(end));
        jobs_.erase(jobs_.begin(), end);
      }
    }
    if (rebuild_needed_ && !stopping) {
      // Refuse what waits, then rebuild.
      answer_unrebuilt(jobs);
      rebuild();
      continue;
    }

    store::Batch batch;
    for (auto& job : jobs) {
      if (auto* r = std::get_if<Read>(&job)) {
        r->fn(engine_);
        continue;
      }
      auto& s = std::get<Submit>(job);
      if (!accepting_) {
        if (s.done) s.done(Result{Outcome::store_unavailable, nullptr, 0, std::nullopt});
        continue;
      }
      if (s.idempotency && !admit_key(s)) continue;
      // What time did since the last command (expiries, lease steps, verifications ending) is applied
      // first as a tick of its own, at the command's time: the admit check sees it, and the command's
      // events, from which its answer is built, are only the command's.
      const std::int64_t now = stamp();
      apply(AccountId(0), Tick{}, nullptr, batch, now);
      if (s.admit && !s.admit(engine_)) {
        if (s.done) s.done(Result{Outcome::refused, nullptr, 0, std::nullopt});
        continue;
      }
      apply(s.account, std::move(s.body), std::move(s.done), batch, now, std::move(s.idempotency),
            std::move(s.fired_switches));
    }
    if (SteadyClock::now() >= next_tick) {
      next_tick = SteadyClock::now() + options_.tick_interval;
      if (accepting_) apply(AccountId(0), Tick{}, nullptr, batch, stamp());
      forget_committed_ids();
    }
    if (stopping) {
      // A last tick, always logged, so that replay on restart reaches the same time and state.
      if (accepting_) {
        std::promise<void> written;
        apply(AccountId(0), Tick{}, [&written](const Result&) { written.set_value(); }, batch, stamp());
        writer_.submit(std::move(batch));
        written.get_future().wait();
      }
      spdlog::info("engine stopped at seq {}, state digest {:016x}", engine_.last_seq(), engine_.digest());
      return;
    }
    if (!batch.empty()) writer_.submit(std::move(batch));
    maybe_snapshot();
  }
}

}  // namespace gpuex
