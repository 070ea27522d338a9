// Batched non-blocking socket sends through io_uring for the WebSocket fan-out (ws_gate.hpp): the
// sessions' gather writes of one published batch go to the kernel in a few `io_uring_enter` calls
// instead of one `sendmsg` each (a system call costs ~1.1 µs on this VM before it does anything).
// Each send carries MSG_DONTWAIT, so io_uring completes it during the submit — with what the socket
// took, possibly less than asked or -EAGAIN, exactly as a non-blocking `sendmsg` would — and never
// waits for room in the background: the caller writes the rest through Asio as before.
//
// One sender per thread that queues (each guarded by its own mutex, so whichever thread runs a flush
// may submit another thread's queue). Where io_uring is missing or refused (an old kernel, a seccomp
// filter, `kernel.io_uring_disabled`, or GPUEX_WS_IO_URING=0 in the environment) for_this_thread()
// returns nullptr and the sessions write with `sendmsg` directly.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gpuex::ws {

class UringSender;

// What waits for a send's outcome.
class UringTarget {
 public:
  virtual ~UringTarget() = default;
  // Bytes written, or -errno (-EAGAIN: none). Runs on the thread that flushed, after the send was
  // submitted (the socket may be closed from then on), with no lock of the sender held.
  virtual void sent(int result) = 0;
  // Has `sender->flush()` run soon on an I/O thread (posted behind the handlers already queued).
  virtual void post_flush(UringSender* sender) = 0;
};

class UringSender {
 public:
  // The calling thread's sender, made on first use; nullptr where io_uring cannot be used.
  static UringSender* for_this_thread();

  ~UringSender();
  UringSender(const UringSender&) = delete;
  UringSender& operator=(const UringSender&) = delete;

  // Queues a send of `iov` (valid, like the socket `fd`, until the send was submitted: a flush) to
  // `target`. Submits at once when kBatch sends are waiting. Returns true when the caller must have
  // flush() run soon (the first send queued since the last flush): it posts it behind the handlers
  // already queued, so their sends join the same submit.
  bool queue(int fd, const iovec* iov, std::size_t count, std::shared_ptr<UringTarget> target);
  // Submits what waits and reports every outcome. Any thread.
  void flush();

  static constexpr unsigned kBatch = 32;

 private:
  friend class UringHandoff;
  struct Ring;
  explicit UringSender(std::unique_ptr<Ring> ring);
  static std::unique_ptr<UringSender> make();
  void submit_locked(std::vector<std::pair<std::shared_ptr<UringTarget>, int>>& done);

  std::mutex mutex_;
  std::unique_ptr<Ring> ring_;
  bool flush_asked_ = false;
  bool pooled_ = false;                 // one of UringHandoff's: free again once flushed
  std::atomic<bool> in_use_{false};     // (pooled) being filled or waiting for its flush
  bool handed_ = false;                 // (pooled, under mutex_) handed over: its next flush frees it
};

// The hub's wake-up of a published batch (ws_hub.cpp) on the thread that publishes: while one lives
// there, a woken session with nothing in flight queues its write here instead of waking its strand,
// and every kBatch sends go to an I/O thread as one flush (UringTarget::post_flush), so the two I/O
// threads submit them — the publishing thread only prepares. Pooled rings, made as needed up to
// kRings; with none free the session wakes its strand as before.
class UringHandoff {
 public:
  UringHandoff();
  ~UringHandoff();  // hands over the ring being filled
  UringHandoff(const UringHandoff&) = delete;
  UringHandoff& operator=(const UringHandoff&) = delete;

  // The one on this thread, or nullptr.
  static UringHandoff* current();
  // The ring to queue the next send on (UringSender::queue, which then never submits it itself),
  // or nullptr when none is free.
  UringSender* sender();
  // After a send was queued on sender(): `target` is the session whose executor hands a full ring over.
  void queued(const std::shared_ptr<UringTarget>& target);

  static constexpr unsigned kRings = 64;

  // Whether the I/O threads have fan-out work waiting: strand wake-ups and handed-over flushes
  // posted and not yet begun. The hub hands writes over only when they have none (a quiet moment:
  // writing at once saves the post and the strand handler per session); under load it wakes the
  // strands, whose turn comes later and then writes more frames at once, which costs less per frame.
  static bool io_idle() { return backlog_.load(std::memory_order_relaxed) == 0; }
  static void posted() { backlog_.fetch_add(1, std::memory_order_relaxed); }
  static void began() { backlog_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  void hand_over();
  UringSender* filling_ = nullptr;
  unsigned count_ = 0;
  std::shared_ptr<UringTarget> poster_;
  UringHandoff* outer_ = nullptr;
  static inline std::atomic<long> backlog_{0};
};

}  // namespace gpuex::ws
