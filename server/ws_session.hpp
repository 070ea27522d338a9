// WebSocket connections of /v1/ws (API.md): an HTTP session that receives an upgrade request hands
// its stream here. Each connection subscribes to channels of the Hub, keeps a bounded outbound
// queue (a reader that falls behind is closed, never buffered without bound), sends heartbeats on
// idle channels, closes connections that fall silent, and runs the dead man's switch.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "server/auth.hpp"
#include "server/config.hpp"
#include "server/dead_mans_switches.hpp"
#include "server/http_response.hpp"
#include "server/http_session.hpp"
#include "server/rate_limiter.hpp"
#include "server/ws_hub.hpp"

namespace gpuex {
class HttpServer;
}

namespace gpuex::ws {

// What every WebSocket connection needs; owned by serve(), outlives every connection.
struct Context {
  Hub& hub;
  KeyStore& keys;
  DeadMansSwitches& switches;
  RateLimiter& per_ip;
  RateLimiter& key_lookups;  // store lookups of keys not cached, per IP (as for HTTP: gate.hpp)
  const MarketTable& markets;
  const ServerConfig& config;
  // Where plain-TCP connections run once upgraded (null: on the HTTP connections' io_context). A fan-out
  // is a handler per subscriber; on the threads that also read HTTP requests and write their answers,
  // those waited behind the fan-out of every change committed before them.
  boost::asio::io_context* io = nullptr;

  // The answer to a request for /v1/ws that will not be upgraded (426 without an upgrade, 429 over
  // the per-IP rate), or nullopt to go ahead.
  std::optional<http::Response> refuse(const http::Request& request, const std::string& ip);
};

// Takes over an accepted connection whose request `upgrade` asked for a WebSocket on /v1/ws from the
// HTTP session `from`, whose place in the server the new session takes (HttpServer::hand_over) before
// it runs.
void start_session(boost::beast::tcp_stream stream, http::Request upgrade, std::string ip, HttpServer& server,
                   Context& context, http::Session* from);
void start_session(boost::beast::ssl_stream<boost::beast::tcp_stream> stream, http::Request upgrade,
                   std::string ip, HttpServer& server, Context& context, http::Session* from);

}  // namespace gpuex::ws
