// One HTTP connection (plain or TLS): reads requests, routes them, writes responses in order.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include <memory>
#include <string>

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

// Starts a session on an accepted socket from `ip` (already counted by the server); `tls` is null
// for plain HTTP.
void start_session(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls,
                   HttpServer& server, std::string ip);

}  // namespace http
}  // namespace gpuex
