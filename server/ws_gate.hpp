// The layer under Beast's websocket::stream of a /v1/ws connection (ws_session.cpp): Beast reads
// through it unchanged, and it owns every write to the socket. The session sends its queued channel
// messages — complete frames built once by the hub and shared by all subscribers — with one gather
// write; Beast still writes its own frames (the upgrade response, the pong that answers a client's
// ping, close frames) through async_write_some here. One write at a time reaches the socket, so a
// frame of Beast's never lands inside one of ours, nor ours inside Beast's. After Beast wrote a close
// frame, no frame of ours follows it.
//
// Beast serializes its own writes (one at a time), and the session has at most one gather write
// outstanding; so at most one write waits here while another is in flight. Beast's go first, unless
// ours is partly written (the rest of a frame must follow at once).
//
// On plain TCP, where io_uring can be used (ws_uring.hpp), the session's gather write is queued on
// the thread's UringSender instead of written at once, so that the sends of many sessions go to the
// kernel in one system call; the session hears the outcome through UringTarget::sent() on the
// thread that flushed. While that send waits, the gate counts as busy (Beast's frames wait behind
// it), and the socket must not be closed before settle().
//
// Strand only (the socket's executor), except uring_sent() and settle(); a mutex guards the state
// they share with the strand.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/beast/websocket/teardown.hpp>

#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <deque>
#include <memory>
#include <mutex>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "server/ws_uring.hpp"

namespace gpuex::ws {

template <class Next>
class FrameGate {
 public:
  using executor_type = typename Next::executor_type;
  using next_layer_type = Next;
  using Done = std::function<void(boost::beast::error_code)>;

  explicit FrameGate(Next next) : next_(std::move(next)) {}

  executor_type get_executor() noexcept { return next_.get_executor(); }
  Next& next_layer() noexcept { return next_; }
  const Next& next_layer() const noexcept { return next_; }

  template <class MutableBufferSequence, class Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return next_.async_read_some(buffers, std::forward<Token>(token));
  }

  // Beast's writes. Each is copied (they are small: a handshake response, a control frame) and
  // written whole before it completes, so it never shares the socket with a partial frame of ours.
  template <class ConstBufferSequence, class Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::beast::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) {
          std::lock_guard lock(mutex_);
          foreign_.push_back(Foreign{boost::beast::buffers_to_string(b), std::move(handler)});
          pump();
        },
        token, buffers);
  }

  enum class Outcome {
    written,  // all of it, at once
    later,    // the rest goes out asynchronously; `done` runs when it is written (or it failed)
    queued,   // on io_uring: `uring` hears the outcome, then the session calls uring_finish() if needed
  };

  // The session's writes: `buffers` (complete frames, valid until the write is over) in one gather
  // write. On a plain TCP socket with nothing else in flight: queued on io_uring when `uring` is given
  // and the thread has a sender, else written directly without blocking (`written` if the kernel took
  // it all: the common case, no completion to dispatch). Otherwise the rest (the gate trims
  // `buffers`) goes out asynchronously and `done` runs when it is written, or with
  // operation_aborted, without writing, once a close frame went out.
  Outcome write_frames(std::vector<boost::asio::const_buffer>& buffers, Done done,
                       const std::shared_ptr<UringTarget>& uring = {}) {
    std::unique_lock lock(mutex_);
    if constexpr (std::is_same_v<Next, boost::beast::tcp_stream>) {
      if (!busy_ && foreign_.empty() && !close_sent_) {
        auto& socket = next_.socket();
        if (uring) {
          if (UringSender* sender = UringSender::for_this_thread()) {
            busy_ = true;
            uring_ = sender;
            uring_total_ = 0;
            uring_iov_.clear();
            // One sendmsg takes at most IOV_MAX buffers (more is EMSGSIZE): the rest, if any, goes
            // out through uring_finish() as after a short send.
            for (const auto& b : buffers) {
              if (uring_iov_.size() == IOV_MAX) break;
              uring_iov_.push_back(iovec{const_cast<void*>(b.data()), b.size()});
              uring_total_ += b.size();
            }
            uring_all_ = uring_iov_.size() == buffers.size();
            lock.unlock();
            if (sender->queue(socket.native_handle(), uring_iov_.data(), uring_iov_.size(), uring)) {
              boost::asio::post(next_.get_executor(), [sender] { sender->flush(); });
            }
            return Outcome::queued;
          }
        }
        boost::beast::error_code ec;
        if (!socket.non_blocking()) socket.non_blocking(true, ec);
        std::size_t n = ec ? 0 : boost::asio::write(socket, buffers, ec);
        if (!ec) return Outcome::written;
        consume(buffers, n);  // would_block, or a failure the async write will report
      }
    }
    mine_ = &buffers;
    mine_done_ = std::move(done);
    pump();
    return Outcome::later;
  }

  // Any thread (the hub's wake-up, with the session's lock held): when nothing is in flight and the
  // socket is open, takes it for a send on `sender` (a UringHandoff's, which never submits inside
  // queue()), and queues the frames `prepare()` returns (the session's, valid until the outcome).
  // Under the gate's lock throughout, so a settle() either sees the send queued or comes first and
  // refuses it.
  template <class Prepare>
  bool uring_claim(UringSender* sender, const std::shared_ptr<UringTarget>& target, Prepare&& prepare) {
    if constexpr (std::is_same_v<Next, boost::beast::tcp_stream>) {
      std::lock_guard lock(mutex_);
      if (busy_ || !foreign_.empty() || close_sent_ || settled_) return false;
      busy_ = true;
      uring_ = sender;
      const std::vector<boost::asio::const_buffer>& buffers = prepare();
      uring_total_ = 0;
      uring_iov_.clear();
      for (const auto& b : buffers) {  // at most IOV_MAX, as in write_frames()
        if (uring_iov_.size() == IOV_MAX) break;
        uring_iov_.push_back(iovec{const_cast<void*>(b.data()), b.size()});
        uring_total_ += b.size();
      }
      uring_all_ = uring_iov_.size() == buffers.size();
      sender->queue(next_.socket().native_handle(), uring_iov_.data(), uring_iov_.size(), target);
      return true;
    } else {
      return false;
    }
  }

  // The io_uring send's outcome (any thread). True when all of it was written and nothing of
  // Beast's waits: the gate is free again, nothing more to do here. Otherwise the session calls
  // uring_finish() on the strand.
  bool uring_sent(int result) {
    std::lock_guard lock(mutex_);
    if (result < 0 || static_cast<std::size_t>(result) != uring_total_ || !uring_all_ || !foreign_.empty()) {
      return false;
    }
    busy_ = false;
    uring_ = nullptr;
    return true;
  }

  // Strand: after uring_sent() returned false. Writes Beast's waiting frames if ours went whole
  // (`written`), else the rest of ours first, asynchronously (`later`: `done` runs), or fails (`done`
  // runs, posted, with the error).
  Outcome uring_finish(std::vector<boost::asio::const_buffer>& buffers, int result, Done done) {
    std::lock_guard lock(mutex_);
    busy_ = false;
    uring_ = nullptr;
    if (result < 0 && result != -EAGAIN && result != -EWOULDBLOCK) {
      boost::beast::error_code ec(-result, boost::system::system_category());
      boost::asio::post(next_.get_executor(), [done = std::move(done), ec] { done(ec); });
      pump();
      return Outcome::later;
    }
    consume(buffers, result < 0 ? 0 : static_cast<std::size_t>(result));
    if (buffers.empty()) {
      pump();
      return Outcome::written;
    }
    mine_ = &buffers;
    mine_done_ = std::move(done);
    mine_first_ = true;
    pump();
    return Outcome::later;
  }

  // Strand, before the socket is closed: a send of ours still waiting on io_uring is submitted first
  // (the kernel then holds the socket it names; a closed descriptor could be reused by another
  // connection before a later submit).
  void settle() {
    UringSender* sender;
    {
      std::lock_guard lock(mutex_);
      settled_ = true;
      sender = uring_;
    }
    if (sender) sender->flush();
  }

  // Whether Beast sent a close frame (nothing of ours may follow it).
  bool close_sent() const { return close_sent_; }

 private:
  struct Foreign {
    std::string bytes;
    boost::asio::any_completion_handler<void(boost::beast::error_code, std::size_t)> handler;
  };

  // Drops the first `n` bytes of `buffers`.
  static void consume(std::vector<boost::asio::const_buffer>& buffers, std::size_t n) {
    std::size_t whole = 0;
    while (whole < buffers.size() && n >= buffers[whole].size()) n -= buffers[whole++].size();
    buffers.erase(buffers.begin(), buffers.begin() + static_cast<std::ptrdiff_t>(whole));
    if (!buffers.empty()) buffers.front() += n;
  }

  // Under mutex_.
  void pump() {
    if (busy_) return;
    if (!foreign_.empty() && !mine_first_) {
      busy_ = true;
      // A close frame's first byte: FIN and opcode 8 (RFC 6455 §5.2); Beast writes a control frame
      // in one buffer, so it starts the write.
      const std::string& bytes = foreign_.front().bytes;
      if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x88) close_sent_ = true;
      boost::asio::async_write(
          next_, boost::asio::buffer(bytes),
          [this, handler = std::move(foreign_.front().handler)](boost::beast::error_code ec, std::size_t n) mutable {
            {
              std::lock_guard lock(mutex_);
              foreign_.pop_front();
              busy_ = false;
              pump();  // the next write starts before Beast's operation goes on
            }
            std::move(handler)(ec, n);
          });
      return;
    }
    if (!mine_) return;
    auto done = std::move(mine_done_);
    const auto* buffers = mine_;
    mine_ = nullptr;
    mine_first_ = false;
    if (close_sent_) {
      boost::asio::post(next_.get_executor(),
                        [done = std::move(done)] { done(boost::asio::error::operation_aborted); });
      return;
    }
    busy_ = true;
    boost::asio::async_write(next_, *buffers,
                             [this, done = std::move(done)](boost::beast::error_code ec, std::size_t) mutable {
                               {
                                 std::lock_guard lock(mutex_);
                                 busy_ = false;
                                 pump();
                               }
                               done(ec);
                             });
  }

  Next next_;
  std::mutex mutex_;
  bool busy_ = false;         // a write is in flight on next_ (or waits on io_uring)
  bool close_sent_ = false;
  std::deque<Foreign> foreign_;  // Beast's writes, the front one in flight while busy_
  const std::vector<boost::asio::const_buffer>* mine_ = nullptr;  // ours, waiting
  Done mine_done_;
  bool mine_first_ = false;  // ours is partly written: it goes before Beast's
  UringSender* uring_ = nullptr;  // where our send waits, while it does
  std::vector<iovec> uring_iov_;
  std::size_t uring_total_ = 0;
  bool uring_all_ = true;  // uring_iov_ holds every buffer of the write
  bool settled_ = false;  // the socket is about to close: no more sends from outside the strand
};

// Beast closes the connection through its layers (websocket/teardown.hpp): through ours to the next.
template <class Next>
void teardown(boost::beast::role_type role, FrameGate<Next>& gate, boost::beast::error_code& ec) {
  using boost::beast::websocket::teardown;
  teardown(role, gate.next_layer(), ec);
}

template <class Next, class TeardownHandler>
void async_teardown(boost::beast::role_type role, FrameGate<Next>& gate, TeardownHandler&& handler) {
  using boost::beast::websocket::async_teardown;
  async_teardown(role, gate.next_layer(), std::forward<TeardownHandler>(handler));
}

}  // namespace gpuex::ws
