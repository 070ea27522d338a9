// One HTTP connection (plain or TLS): reads requests, routes them, writes responses in order.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpuex {
class HttpServer;

namespace http {

// What the server needs from any session during shutdown.
class Session {
 public:
  virtual ~Session() = default;
  // Closes the connection now if it is between requests, else after the response in flight.
  virtual void shutdown() = 0;
};

// While one lives on a thread, the answers that thread hands to connections (a handler's `Respond`) are
// held and handed to the I/O threads together when it ends: one post to the io_context for all of
// them, not one per answer. The writer's completion thread answers a whole transaction's commands in
// one such scope: each post from outside the I/O threads takes the scheduler's lock and wakes an I/O
// thread (a futex call and a context switch), and from inside them a post is a thread-local queue push.
// Answers made on a thread without one are posted at once.
class DeferredAnswers {
 public:
  DeferredAnswers();
  ~DeferredAnswers();
  DeferredAnswers(const DeferredAnswers&) = delete;
  DeferredAnswers& operator=(const DeferredAnswers&) = delete;
  // The innermost scope of this thread, or null.
  static DeferredAnswers* current();
  // `deliver` runs on `executor` (a connection's strand) once the scope ends.
  void add(boost::asio::any_io_executor executor, std::function<void()> deliver);

 private:
  struct Answer {
    boost::asio::any_io_executor executor;
    std::function<void()> deliver;
  };
  std::vector<Answer> answers_;
  DeferredAnswers* outer_;
};

// Starts a session on an accepted socket from `ip` (already counted by the server); `tls` is null
// for plain HTTP.
void start_session(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls,
                   HttpServer& server, std::string ip);

}  // namespace http
}  // namespace gpuex
