// See http_client.hpp. Async Beast calls run with io_context::run_for, so no call can hang a test.
#include "support/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <thread>

namespace gpuex::test {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

boost::json::value HttpReply::json() const { return boost::json::parse(body); }

struct HttpClient::Impl {
  unsigned short port;
  std::chrono::milliseconds timeout;
  net::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  // Runs the queued async work, bounded by the timeout; throws on error.
  void run(beast::error_code& ec) {
    ioc.restart();
    ioc.run_for(timeout);
    if (!ioc.stopped()) {
      stream->cancel();
      ioc.restart();
      ioc.run();
      throw std::runtime_error("HTTP call timed out");
    }
    if (ec) throw beast::system_error(ec);
  }

  void connect() {
    stream.emplace(ioc);
    buffer.clear();
    beast::error_code ec;
    stream->async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                          [&](beast::error_code e) { ec = e; });
    run(ec);
  }
};

HttpClient::HttpClient(unsigned short port, std::chrono::milliseconds timeout) : impl_(new Impl{port, timeout, {}, {}, {}}) {}
HttpClient::~HttpClient() { delete impl_; }

HttpReply HttpClient::request(const std::string& method, const std::string& target, const std::string& body,
                              const std::vector<std::pair<std::string, std::string>>& headers) {
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  req.keep_alive(true);
  for (const auto& [k, v] : headers) req.set(k, v);
  if (!body.empty() && req.find(bhttp::field::content_type) == req.end()) {
    req.set(bhttp::field::content_type, "application/json");
  }
  req.body() = body;
  req.prepare_payload();

  for (int attempt = 0;; ++attempt) {
    try {
      if (!impl_->stream) impl_->connect();
      beast::error_code ec;
      bhttp::async_write(*impl_->stream, req, [&](beast::error_code e, std::size_t) { ec = e; });
      impl_->run(ec);
      bhttp::response_parser<bhttp::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      parser.skip(req.method() == bhttp::verb::head);  // Content-Length says what GET would send
      bhttp::async_read(*impl_->stream, impl_->buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; });
      impl_->run(ec);
      auto res = parser.release();
      HttpReply reply;
      reply.status = res.result_int();
      reply.body = std::move(res.body());
      for (const auto& field : res) {
        std::string name(field.name_string());
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        reply.headers[name] = std::string(field.value());
      }
      if (!res.keep_alive()) impl_->stream.reset();
      return reply;
    } catch (const beast::system_error&) {
      // A keep-alive connection the server closed between requests: one fresh try.
      impl_->stream.reset();
      if (attempt > 0) throw;
    }
  }
}

bool wait_for_status(unsigned short port, const std::string& target, unsigned status,
                     std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      HttpClient client(port, std::chrono::seconds(2));
      if (client.get(target).status == status) return true;
    } catch (const std::exception&) {
      // not up yet
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace gpuex::test
