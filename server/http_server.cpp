// See http_server.hpp.
#include "server/http_server.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <charconv>
#include <stdexcept>

namespace gpuex {

namespace net = boost::asio;
using tcp = net::ip::tcp;

tcp::endpoint parse_listen_address(const std::string& listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) {
    throw std::invalid_argument("listen address must be HOST:PORT, got '" + listen + "'");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  auto port_text = std::string_view(listen).substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port > 65535) {
    throw std::invalid_argument("listen port must be 0..65535, got '" + std::string(port_text) + "'");
  }
  boost::system::error_code addr_ec;
  auto address = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, addr_ec);
  if (addr_ec) throw std::invalid_argument("listen host must be an IP address, got '" + host + "'");
  return {address, static_cast<unsigned short>(port)};
}

HttpServer::HttpServer(net::io_context& ioc, const ServerConfig& config, const http::Router& router,
                       Metrics& metrics, net::ssl::context* tls)
    : ioc_(ioc), config_(config), router_(router), metrics_(metrics), tls_(tls),
      acceptor_(net::make_strand(ioc)) {}

tcp::endpoint HttpServer::start() {
  auto endpoint = parse_listen_address(config_.listen);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(net::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(net::socket_base::max_listen_connections);
  accept();
  return acceptor_.local_endpoint();
}

void HttpServer::accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || stopping_) return;
      // Out of file descriptors and the like: the pending connection stays queued, so accepting again
      // at once would fail again in a tight loop. Wait a little (and log at most that often).
      spdlog::warn("http: accept failed: {}; accepting again in 100 ms", ec.message());
      auto pause = std::make_shared<net::steady_timer>(ioc_, std::chrono::milliseconds(100));
      pause->async_wait([this, pause](boost::system::error_code) {
        if (!stopping_) accept();
      });
      return;
    }
    on_accept(std::move(socket));
    if (!stopping_) accept();
  });
}

void HttpServer::on_accept(tcp::socket socket) {
  boost::system::error_code ec;
  auto remote = socket.remote_endpoint(ec);
  if (ec) return;
  std::string ip = remote.address().to_string();
  {
    std::lock_guard lock(mutex_);
    if (sessions_.size() >= config_.max_connections) {
      refuse(std::move(socket), ip, "the server has reached its connection limit");
      return;
    }
    auto& count = per_ip_[ip];
    if (count >= config_.max_connections_per_ip) {
      refuse(std::move(socket), ip, "too many connections from this address");
      return;
    }
    ++count;
  }
  http::start_session(std::move(socket), tls_, *this, std::move(ip));
}

void HttpServer::set_rate_limit_headers(boost::beast::http::fields& fields, const std::string& ip) const {
  if (!ip_limiter_ || fields.find("RateLimit-Limit") != fields.end()) return;
  const auto d = ip_limiter_->peek(ip);
  fields.set("RateLimit-Limit", std::to_string(d.limit));
  fields.set("RateLimit-Remaining", std::to_string(d.remaining));
}

void HttpServer::refuse(tcp::socket socket, const std::string& ip, std::string_view why) {
  // A plain 429 before closing, so a well-behaved client backs off instead of retrying at once.
  boost::beast::http::fields limits;
  set_rate_limit_headers(limits, ip);
  auto text = std::make_shared<std::string>(
      "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\n");
  for (const auto& field : limits) {
    *text += std::string(field.name_string()) + ": " + std::string(field.value()) + "\r\n";
  }
  *text += "Connection: close\r\nContent-Length: ";
  std::string body = R"({"error":{"code":"rate_limited","message":")" + std::string(why) + "\"}}";
  *text += std::to_string(body.size()) + "\r\n\r\n" + body;
  auto sock = std::make_shared<tcp::socket>(std::move(socket));
  if (tls_) {
    // A TLS client cannot read plain text; just close.
    sock->close();
    return;
  }
  net::async_write(*sock, net::buffer(*text), [sock, text](boost::system::error_code, std::size_t) {
    boost::system::error_code ignored;
    sock->shutdown(tcp::socket::shutdown_both, ignored);
  });
}

void HttpServer::shutdown() {
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
  std::vector<std::shared_ptr<http::Session>> live;
  {
    // Under the lock that registers sessions: each is either listed here or sees stopping_ as it
    // joins (add_session, hand_over) and is shut down there.
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& [ptr, weak] : sessions_) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (auto& s : live) s->shutdown();
}

std::size_t HttpServer::sessions() const {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

void HttpServer::add_session(const std::shared_ptr<http::Session>& session) {
  {
    std::lock_guard lock(mutex_);
    sessions_.emplace(session.get(), session);
    metrics_.connection_opened();
    if (!stopping_) return;
  }
  session->shutdown();  // joined after shutdown() listed the sessions
}

void HttpServer::hand_over(http::Session* from, const std::shared_ptr<http::Session>& to) {
  {
    std::lock_guard lock(mutex_);
    sessions_.erase(from);
    sessions_.emplace(to.get(), to);
    if (!stopping_) return;
  }
  to->shutdown();  // as in add_session
}

void HttpServer::remove_session(http::Session* session, const std::string& ip) {
  std::lock_guard lock(mutex_);
  if (sessions_.erase(session) > 0) metrics_.connection_closed();
  auto it = per_ip_.find(ip);
  if (it != per_ip_.end() && --it->second == 0) per_ip_.erase(it);
}

}  // namespace gpuex
