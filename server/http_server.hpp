// Accepts HTTP connections, enforces connection limits, and tracks sessions for graceful shutdown.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/http/fields.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/config.hpp"
#include "server/http_session.hpp"
#include "server/metrics.hpp"
#include "server/rate_limiter.hpp"
#include "server/router.hpp"

namespace gpuex {
namespace ws {
struct Context;
}

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& ioc, const ServerConfig& config, const http::Router& router,
             Metrics& metrics, boost::asio::ssl::context* tls);

  // Binds `config.listen` and starts accepting; returns the bound endpoint (port 0 picks one).
  boost::asio::ip::tcp::endpoint start();
  // Stops accepting; idle connections close now, busy ones after their response.
  void shutdown();
  bool stopping() const { return stopping_.load(); }
  std::size_t sessions() const;

  const ServerConfig& config() const { return config_; }
  const http::Router& router() const { return router_; }
  Metrics& metrics() { return metrics_; }

  // Called by sessions as they start and end. A session is added before it runs (else it could be
  // handed over, or end, before it is listed: its entry would then outlive it); one added after
  // shutdown() is shut down at once.
  void add_session(const std::shared_ptr<http::Session>& session);
  void remove_session(http::Session* session, const std::string& ip);
  // A connection changes hands (an HTTP session upgraded to a WebSocket): `to` takes `from`'s place
  // and its count; `from` must then not call remove_session. Before `to` runs, as for add_session
  // (a WebSocket session that runs unlisted can arm a dead man's switch that a graceful stop then
  // never fires), and `to` is shut down at once when shutdown() came first.
  void hand_over(http::Session* from, const std::shared_ptr<http::Session>& to);

  // Where upgrades to /v1/ws go; without it /v1/ws is an unknown route.
  void set_websocket(ws::Context* context) { websocket_ = context; }
  ws::Context* websocket() const { return websocket_; }
  // The per-IP limiter whose state answers carry in RateLimit-* when no limit was charged for them
  // (API.md: the headers are on every response).
  void set_ip_limiter(const RateLimiter* limiter) { ip_limiter_ = limiter; }
  // Sets RateLimit-Limit / RateLimit-Remaining from that limiter's state for `ip`, unless the answer
  // already carries them (a limit was charged for it).
  void set_rate_limit_headers(boost::beast::http::fields& fields, const std::string& ip) const;

 private:
  void accept();
  void on_accept(boost::asio::ip::tcp::socket socket);
  void refuse(boost::asio::ip::tcp::socket socket, const std::string& ip, std::string_view why);

  boost::asio::io_context& ioc_;
  const ServerConfig& config_;
  const http::Router& router_;
  Metrics& metrics_;
  boost::asio::ssl::context* tls_;
  ws::Context* websocket_ = nullptr;
  const RateLimiter* ip_limiter_ = nullptr;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};  // set under mutex_ (shutdown), read anywhere

  mutable std::mutex mutex_;
  std::unordered_map<http::Session*, std::weak_ptr<http::Session>> sessions_;
  std::unordered_map<std::string, std::size_t> per_ip_;
};

// Splits "host:port" ("[::1]:8080" for IPv6); throws std::invalid_argument with a clear message.
boost::asio::ip::tcp::endpoint parse_listen_address(const std::string& listen);

}  // namespace gpuex
