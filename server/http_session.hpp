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
// held and handed to the I/O threads together when it ends: one post to each I/O thread's io_context for
// all of its connections' answers, not one per answer. The writer's completion thread answers a whole
// transaction's commands in one such scope: each post from outside an I/O thread takes its scheduler's
// lock and may wake it (a futex call and a context switch).
// Answers made on a thread without one are posted at once.
class DeferredAnswers {
 public:
  DeferredAnswers();
  ~DeferredAnswers();
  DeferredAnswers(const DeferredAnswers&) = delete;
  DeferredAnswers& operator=(const DeferredAnswers&) = delete;
  // The innermost scope of this thread, or null.
  static DeferredAnswers* current();
  // `deliver` runs on `executor` (a connection's) once the scope ends.
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
