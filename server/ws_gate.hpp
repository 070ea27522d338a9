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
// Strand only (the socket's executor).
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

#include <deque>
#include <functional>
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
          foreign_.push_back(Foreign{boost::beast::buffers_to_string(b), std::move(handler)});
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
    if constexpr (std::is_same_v<Next, boost::beast::tcp_stream>) {
      if (!busy_ && foreign_.empty() && !close_sent_) {
        auto& socket = next_.socket();
        boost::beast::error_code ec;
        if (!socket.non_blocking()) socket.non_blocking(true, ec);
        std::size_t n = ec ? 0 : boost::asio::write(socket, buffers, ec);
        if (!ec) return true;
        consume(buffers, n);  // would_block, or a failure the async write will report
      }
    }
    mine_ = &buffers;
    mine_done_ = std::move(done);
    pump();
    return false;
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

  void pump() {
    if (busy_) return;
    if (!foreign_.empty()) {
      busy_ = true;
      // A close frame's first byte: FIN and opcode 8 (RFC 6455 §5.2); Beast writes a control frame
      // in one buffer, so it starts the write.
      const std::string& bytes = foreign_.front().bytes;
      if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x88) close_sent_ = true;
      boost::asio::async_write(
          next_, boost::asio::buffer(bytes),
          [this, handler = std::move(foreign_.front().handler)](boost::beast::error_code ec, std::size_t n) mutable {
            foreign_.pop_front();
            busy_ = false;
            pump();  // the next write starts before Beast's operation goes on
            std::move(handler)(ec, n);
          });
      return;
    }
    if (!mine_) return;
    auto done = std::move(mine_done_);
    const auto* buffers = mine_;
    mine_ = nullptr;
    if (close_sent_) {
      boost::asio::post(next_.get_executor(),
                        [done = std::move(done)] { done(boost::asio::error::operation_aborted); });
      return;
    }
    busy_ = true;
    boost::asio::async_write(next_, *buffers,
                             [this, done = std::move(done)](boost::beast::error_code ec, std::size_t) mutable {
                               busy_ = false;
                               pump();
                               done(ec);
                             });
  }

  Next next_;
  bool busy_ = false;         // a write is in flight on next_
  bool close_sent_ = false;
  std::deque<Foreign> foreign_;  // Beast's writes, the front one in flight while busy_
  const std::vector<boost::asio::const_buffer>* mine_ = nullptr;  // ours, waiting
  Done mine_done_;
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
