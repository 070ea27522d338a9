// See ws_uring.hpp.
#include "server/ws_uring.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#if GPUEX_HAVE_URING
#include <liburing.h>
#include <sys/socket.h>
#endif

namespace gpuex::ws {

#if GPUEX_HAVE_URING

struct UringSender::Ring {
  struct Slot {
    std::shared_ptr<UringTarget> target;
    msghdr msg{};
  };
  io_uring ring{};
  std::array<Slot, kBatch> slots;
  unsigned pending = 0;
  bool live = false;

  ~Ring() {
    if (live) io_uring_queue_exit(&ring);
  }
};

namespace {

bool disabled_by_environment() {
  const char* v = std::getenv("GPUEX_WS_IO_URING");
  return v && (std::string_view(v) == "0" || std::string_view(v) == "off");
}

// Every sender lives as long as the process: a flush posted by one thread may run on another.
std::mutex registry_mutex;
// Never destroyed: a send still queued when the server stops holds its session, whose destructor
// must not run after the server's.
std::vector<std::unique_ptr<UringSender>>& registry() {
  static auto* senders = new std::vector<std::unique_ptr<UringSender>>;
  return *senders;
}

}  // namespace

std::unique_ptr<UringSender> UringSender::make() {
  static const bool off = disabled_by_environment();
  if (off) return nullptr;
  auto ring = std::make_unique<Ring>();
  // SUBMIT_ALL: a send that fails at submission does not hold back the others (submit_locked()
  // counts on every queued send being submitted: without it, on a kernel before 5.18, it could wait
  // for ever, so such a kernel gets sendmsg); COOP_TASKRUN: no interrupt of this thread for
  // completion work (it runs at the next io_uring_enter).
  io_uring_params params{};
  params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init_params(2 * kBatch, &ring->ring, &params);
  if (rc < 0) {
    static std::once_flag logged;
    std::call_once(logged, [rc] {
      spdlog::info("ws: io_uring unavailable ({}); socket writes use sendmsg", std::strerror(-rc));
    });
    return nullptr;
  }
  ring->live = true;
  return std::unique_ptr<UringSender>(new UringSender(std::move(ring)));
}

UringSender* UringSender::for_this_thread() {
  thread_local bool tried = false;
  thread_local UringSender* mine = nullptr;
  if (tried) return mine;
  tried = true;
  auto sender = make();
  if (!sender) return nullptr;
  std::lock_guard lock(registry_mutex);
  registry().push_back(std::move(sender));
  mine = registry().back().get();
  return mine;
}

namespace {
thread_local UringHandoff* current_handoff = nullptr;
std::vector<UringSender*> pool;  // under registry_mutex
bool pool_unavailable = false;   // io_uring refused: no use trying again
}  // namespace

UringHandoff::UringHandoff() : outer_(current_handoff) { current_handoff = this; }

UringHandoff::~UringHandoff() {
  hand_over();
  current_handoff = outer_;
}

UringHandoff* UringHandoff::current() { return current_handoff; }

UringSender* UringHandoff::sender() {
  if (filling_) return filling_;
  std::lock_guard lock(registry_mutex);
  if (pool_unavailable) return nullptr;
  for (UringSender* s : pool) {
    bool expected = false;
    if (s->in_use_.compare_exchange_strong(expected, true)) return filling_ = s;
  }
  if (pool.size() >= kRings) return nullptr;
  auto made = UringSender::make();
  if (!made) {
    pool_unavailable = true;
    return nullptr;
  }
  made->pooled_ = true;
  made->in_use_ = true;
  filling_ = made.get();
  pool.push_back(filling_);
  registry().push_back(std::move(made));
  return filling_;
}

void UringHandoff::queued(const std::shared_ptr<UringTarget>& target) {
  poster_ = target;
  if (++count_ == UringSender::kBatch) hand_over();
}

void UringHandoff::hand_over() {
  if (!filling_) return;
  auto* s = std::exchange(filling_, nullptr);
  count_ = 0;
  auto poster = std::move(poster_);
  poster_.reset();
  {
    std::lock_guard lock(s->mutex_);
    s->handed_ = true;
  }
  if (poster) {
    poster->post_flush(s);
  } else {
    s->flush();  // nothing queued on it
  }
}

UringSender::UringSender(std::unique_ptr<Ring> ring) : ring_(std::move(ring)) {}
UringSender::~UringSender() = default;

bool UringSender::queue(int fd, const iovec* iov, std::size_t count, std::shared_ptr<UringTarget> target) {
  std::vector<std::pair<std::shared_ptr<UringTarget>, int>> done;
  bool ask_flush = false;
  {
    std::lock_guard lock(mutex_);
    Ring& r = *ring_;
    auto& slot = r.slots[r.pending];
    slot.target = std::move(target);
    slot.msg = {};
    slot.msg.msg_iov = const_cast<iovec*>(iov);
    slot.msg.msg_iovlen = count;
    io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);  // never null: at most kBatch of 2 * kBatch entries wait
    io_uring_prep_sendmsg(sqe, fd, &slot.msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, r.pending);
    ++r.pending;
    if (pooled_) {
      // UringHandoff hands it over when full.
    } else if (r.pending == kBatch) {
      submit_locked(done);
    } else if (!flush_asked_) {
      flush_asked_ = ask_flush = true;
    }
  }
  for (auto& [t, result] : done) t->sent(result);
  return ask_flush;
}

void UringSender::flush() {
  std::vector<std::pair<std::shared_ptr<UringTarget>, int>> done;
  {
    std::lock_guard lock(mutex_);
    flush_asked_ = false;
    if (ring_->pending != 0) submit_locked(done);
    if (pooled_ && handed_) {
      handed_ = false;
      in_use_.store(false);
    }
  }
  for (auto& [t, result] : done) t->sent(result);
}

void UringSender::submit_locked(std::vector<std::pair<std::shared_ptr<UringTarget>, int>>& done) {
  Ring& r = *ring_;
  const unsigned n = r.pending;
  done.reserve(n);
  // Every send completes during the submit (MSG_DONTWAIT: no waiting for room), so this waits for
  // nothing in practice; it makes sure all n outcomes are in before the slots are reused.
  unsigned seen = 0;
  bool submitted = false;
  while (seen < n) {
    int rc = submitted ? io_uring_wait_cqe_nr(&r.ring, nullptr, 1) : io_uring_submit_and_wait(&r.ring, n);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      spdlog::critical("ws: io_uring_enter failed: {}", std::strerror(-rc));
      std::abort();  // the sends' state is unknown: better no server than frames sent twice or lost
    }
    if (!submitted && rc >= 0) submitted = true;
    unsigned head;
    io_uring_cqe* cqe;
    unsigned reaped = 0;
    io_uring_for_each_cqe(&r.ring, head, cqe) {
      auto& slot = r.slots[io_uring_cqe_get_data64(cqe)];
      done.emplace_back(std::move(slot.target), cqe->res);
      ++reaped;
    }
    io_uring_cq_advance(&r.ring, reaped);
    seen += reaped;
  }
  r.pending = 0;
}

#else  // no liburing at build time

struct UringSender::Ring {};
UringSender* UringSender::for_this_thread() { return nullptr; }
std::unique_ptr<UringSender> UringSender::make() { return nullptr; }
UringHandoff::UringHandoff() {}
UringHandoff::~UringHandoff() {}
UringHandoff* UringHandoff::current() { return nullptr; }
UringSender* UringHandoff::sender() { return nullptr; }
void UringHandoff::queued(const std::shared_ptr<UringTarget>&) {}
void UringHandoff::hand_over() {}
UringSender::UringSender(std::unique_ptr<Ring> ring) : ring_(std::move(ring)) {}
UringSender::~UringSender() = default;
bool UringSender::queue(int, const iovec*, std::size_t, std::shared_ptr<UringTarget>) { return false; }
void UringSender::flush() {}
void UringSender::submit_locked(std::vector<std::pair<std::shared_ptr<UringTarget>, int>>&) {}

#endif

}  // namespace gpuex::ws
