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

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gpuex::ws {

// What waits for a send's outcome.
class UringTarget {
 public:
  virtual ~UringTarget() = default;
  // Bytes written, or -errno (-EAGAIN: none). Runs on the thread that flushed, after the send was
  // submitted (the socket may be closed from then on), with no lock of the sender held.
  virtual void sent(int result) = 0;
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
  struct Ring;
  explicit UringSender(std::unique_ptr<Ring> ring);
  void submit_locked(std::vector<std::pair<std::shared_ptr<UringTarget>, int>>& done);

  std::mutex mutex_;
  std::unique_ptr<Ring> ring_;
  bool flush_asked_ = false;
};

}  // namespace gpuex::ws
