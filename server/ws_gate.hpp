// The layer under Beast's websocket::stream of a /v1/ws connection (ws_session.cpp): Beast reads
// through it unchanged, and it owns every write to the socket. The session sends its queued channel
// messages — complete frames built once by the hub and shared by all subscribers — with one gather
// write; Beast still writes its own frames (the upgrade response, the pong that answers a client's
// ping, close frames) through async_write_some here. One write at a time reaches the socket, so a
// frame of Beast's never lands inside one of ours, nor ours inside Beast's. After Beast wrote a close
// frame, no frame of ours follows it.
//
// Beast serializes its own writes (one at a time), and the session has at most one gather write
// outstanding; so at most one write waits here while another is in flight. Beast's go first.
// Everything runs on the strand (the socket's executor) except try_write_now, which the hub's thread
// calls to write a session's frames without a post to the strand: the gate's state is under a mutex.
// No socket is closed while try_write_now writes to it: Beast closes it only after a close frame
// went out or through teardown (both seen here), the session only after it stopped taking messages.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

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

#include <array>
#include <cerrno>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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
          {
            std::lock_guard lock(mutex_);
            foreign_.push_back(Foreign{boost::beast::buffers_to_string(b), std::move(handler)});
          }
          pump();
        },
        token, buffers);
  }

  // The session's writes: `buffers` (complete frames, valid until `done` runs) in one gather write.
  // On a plain TCP socket with nothing else in flight it first writes directly, without blocking:
  // if the kernel takes it all, this returns true and `done` is dropped (the common case: no
  // completion to dispatch). Otherwise the rest (the gate trims `buffers`) goes out asynchronously
  // and `done` runs when it is written, or with operation_aborted, without writing, once a close
  // frame went out.
  bool write_frames(std::vector<boost::asio::const_buffer>& buffers, Done done) {
    if constexpr (kPlain) {
      std::lock_guard lock(mutex_);
      if (!busy_ && foreign_.empty() && !close_sent_) {
        boost::beast::error_code ec;
        std::size_t n = send_now(buffers, ec);
        if (!ec) return true;
        consume(buffers, n);  // would_block, or a failure the async write will report
      }
    }
    {
      std::lock_guard lock(mutex_);
      mine_ = &buffers;
      mine_done_ = std::move(done);
    }
    pump();
    return false;
  }

  // What try_write_now did.
  enum class Now {
    busy,     // the socket was not free (a write of Beast's in flight or waiting, a close frame sent,
              // or TLS): nothing was written
    written,  // all of it
    partial,  // the kernel took only `written` bytes (maybe none): the gate is held for the rest,
              // which the session must hand to continue_frames on the strand
    failed,   // the socket failed (`ec`); the session's read fails too and ends it
  };

  // Any thread, while the session has no write of its own in flight or waiting here (its lock held,
  // so it starts none): writes `buffers` now, without blocking. `buffers` is trimmed to what was
  // not written.
  Now try_write_now(std::vector<boost::asio::const_buffer>& buffers, boost::beast::error_code& ec) {
    if constexpr (!kPlain) {
      return Now::busy;
    } else {
      std::lock_guard lock(mutex_);
      if (busy_ || !foreign_.empty() || close_sent_) return Now::busy;
      std::size_t n = send_now(buffers, ec);
      if (!ec) return Now::written;
      consume(buffers, n);
      if (ec != boost::asio::error::would_block) return Now::failed;
      ec = {};
      busy_ = true;  // held for continue_frames
      return Now::partial;
    }
  }

  // Strand: the rest of a partial try_write_now (`buffers` valid until `done` runs).
  void continue_frames(std::vector<boost::asio::const_buffer>& buffers, Done done) {
    boost::asio::async_write(next_, buffers, [this, done = std::move(done)](boost::beast::error_code ec, std::size_t) {
      {
        std::lock_guard lock(mutex_);
        busy_ = false;
      }
      pump();
      done(ec);
    });
  }

  // Whether Beast sent a close frame (nothing of ours may follow it).
  bool close_sent() const {
    std::lock_guard lock(mutex_);
    return close_sent_;
  }

  // Strand: Beast tears the connection down (the socket closes): nothing more is written to it.
  void torn_down() {
    std::lock_guard lock(mutex_);
    close_sent_ = true;
  }

 private:
  static constexpr bool kPlain = std::is_same_v<Next, boost::beast::tcp_stream>;

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

  // Under the lock, plain TCP: writes as much of `buffers` as the kernel takes now (sendmsg with
  // MSG_DONTWAIT, whatever the socket's mode); `ec` would_block if not all of it, or the failure.
  std::size_t send_now(const std::vector<boost::asio::const_buffer>& buffers, boost::beast::error_code& ec) {
    const int fd = next_.socket().native_handle();
    std::size_t total = 0, at = 0;
    std::size_t skip = 0;  // bytes of buffers[at] already written
    std::array<iovec, 64> iov;
    while (at < buffers.size()) {
      std::size_t count = 0;
      for (std::size_t i = at; i < buffers.size() && count < iov.size(); ++i, ++count) {
        const std::size_t off = i == at ? skip : 0;
        iov[count].iov_base = const_cast<char*>(static_cast<const char*>(buffers[i].data()) + off);
        iov[count].iov_len = buffers[i].size() - off;
      }
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = count;
      ssize_t r;
      do r = ::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      while (r < 0 && errno == EINTR);
      if (r < 0) {
        ec = errno == EAGAIN || errno == EWOULDBLOCK ? boost::beast::error_code(boost::asio::error::would_block)
                                                     : boost::beast::error_code(errno, boost::system::system_category());
        return total;
      }
      auto n = static_cast<std::size_t>(r);
      total += n;
      n += skip;
      while (at < buffers.size() && n >= buffers[at].size()) n -= buffers[at++].size();
      skip = n;
      if (static_cast<std::size_t>(r) == 0) break;
    }
    if (at < buffers.size()) ec = boost::asio::error::would_block;
    return total;
  }

  void pump() {
    std::unique_lock lock(mutex_);
    if (busy_) return;
    if (!foreign_.empty()) {
      busy_ = true;
      // A close frame's first byte: FIN and opcode 8 (RFC 6455 §5.2); Beast writes a control frame
      // in one buffer, so it starts the write.
      Foreign& front = foreign_.front();  // stays put (a deque's push_back moves no element) until popped
      if (!front.bytes.empty() && static_cast<unsigned char>(front.bytes[0]) == 0x88) close_sent_ = true;
      auto handler = std::move(front.handler);
      lock.unlock();
      boost::asio::async_write(
          next_, boost::asio::buffer(front.bytes),
          [this, handler = std::move(handler)](boost::beast::error_code ec, std::size_t n) mutable {
            {
              std::lock_guard relock(mutex_);
              foreign_.pop_front();
              busy_ = false;
            }
            pump();  // the next write starts before Beast's operation goes on
            std::move(handler)(ec, n);
          });
      return;
    }
    if (!mine_) return;
    auto done = std::move(mine_done_);
    auto* buffers = mine_;
    mine_ = nullptr;
    if (close_sent_) {
      lock.unlock();
      boost::asio::post(next_.get_executor(),
                        [done = std::move(done)] { done(boost::asio::error::operation_aborted); });
      return;
    }
    busy_ = true;
    lock.unlock();
    boost::asio::async_write(next_, *buffers,
                             [this, done = std::move(done)](boost::beast::error_code ec, std::size_t) mutable {
                               {
                                 std::lock_guard relock(mutex_);
                                 busy_ = false;
                               }
                               pump();
                               done(ec);
                             });
  }

  Next next_;
  mutable std::mutex mutex_;  // guards what follows (try_write_now comes from the hub's thread)
  bool busy_ = false;         // a write is in flight on next_ (or try_write_now holds it for the rest)
  bool close_sent_ = false;   // or the connection was torn down
  std::deque<Foreign> foreign_;  // Beast's writes, the front one in flight while busy_
  std::vector<boost::asio::const_buffer>* mine_ = nullptr;  // ours, waiting
  Done mine_done_;
};

// Beast closes the connection through its layers (websocket/teardown.hpp): through ours to the next.
template <class Next>
void teardown(boost::beast::role_type role, FrameGate<Next>& gate, boost::beast::error_code& ec) {
  using boost::beast::websocket::teardown;
  gate.torn_down();
  teardown(role, gate.next_layer(), ec);
}

template <class Next, class TeardownHandler>
void async_teardown(boost::beast::role_type role, FrameGate<Next>& gate, TeardownHandler&& handler) {
  using boost::beast::websocket::async_teardown;
  gate.torn_down();
  async_teardown(role, gate.next_layer(), std::forward<TeardownHandler>(handler));
}

}  // namespace gpuex::ws
