// See ws_client.hpp. Every operation is async and runs with io_context::run_for, and at most one
// read is ever pending: a read that did not finish in time stays pending for the next call.
#include "support/ws_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cctype>
#include <ostream>
#include <stdexcept>

namespace gpuex::test {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

struct WsClient::Impl {
  net::io_context ioc;
  websocket::stream<beast::tcp_stream> ws{ioc};
  beast::flat_buffer buffer;
  bool reading = false;
  bool read_done = false;
  beast::error_code read_ec;
  std::optional<Ended> ended;
  std::ostream* transcript = nullptr;
  std::vector<std::string> pongs;
  std::string extensions;

  void log(const char* from, const std::string& text) {
    if (transcript) *transcript << R"({"from":")" << from << R"(","message":)" << text << "}\n";
  }

  // Runs until `done` or the timeout; returns whether `done` became true.
  bool run(const bool& done, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done && std::chrono::steady_clock::now() < deadline) {
      ioc.restart();
      ioc.run_one_until(deadline);
    }
    return done;
  }

  void connect(unsigned short port, const Headers& headers, int receive_buffer, websocket::response_type* res,
               bool offer_deflate = false) {
    auto& socket = beast::get_lowest_layer(ws).socket();
    socket.open(tcp::v4());
    if (receive_buffer > 0) socket.set_option(net::socket_base::receive_buffer_size(receive_buffer));
    bool done = false;
    beast::error_code ec;
    beast::get_lowest_layer(ws).async_connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port),
                                              [&](beast::error_code e) {
                                                ec = e;
                                                done = true;
                                              });
    if (!run(done, std::chrono::seconds(5)) || ec) throw std::runtime_error("ws connect failed: " + ec.message());
    ws.set_option(websocket::stream_base::decorator([headers](websocket::request_type& req) {
      for (const auto& [k, v] : headers) req.set(k, v);
    }));
    ws.read_message_max(64 * 1024 * 1024);
    if (offer_deflate) {
      websocket::permessage_deflate pmd;
      pmd.client_enable = true;
      ws.set_option(pmd);
    }
    ws.control_callback([this](websocket::frame_type kind, beast::string_view payload) {
      if (kind == websocket::frame_type::pong) pongs.emplace_back(payload);
    });
    websocket::response_type own;
    if (!res) res = &own;
    done = false;
    auto handler = [&](beast::error_code e) {
      ec = e;
      done = true;
    };
    ws.async_handshake(*res, "127.0.0.1", "/v1/ws", handler);
    if (!run(done, std::chrono::seconds(5))) throw std::runtime_error("ws handshake timed out");
    if (ec) throw std::runtime_error("ws handshake refused: " + ec.message());
    extensions = std::string((*res)[boost::beast::http::field::sec_websocket_extensions]);
    ws.text(true);
  }
};

WsClient::WsClient(unsigned short port, const Headers& headers, int receive_buffer, bool offer_deflate)
    : impl_(new Impl) {
  try {
    impl_->connect(port, headers, receive_buffer, nullptr, offer_deflate);
  } catch (...) {
    delete impl_;
    throw;
  }
}

WsClient::~WsClient() {
  beast::error_code ignored;
  beast::get_lowest_layer(impl_->ws).socket().close(ignored);
  impl_->ioc.restart();
  impl_->ioc.poll();
  delete impl_;
}

void WsClient::record(std::ostream* out) { impl_->transcript = out; }

void WsClient::send(const std::string& text) {
  impl_->log("client", text);
  bool done = false;
  beast::error_code ec;
  impl_->ws.async_write(net::buffer(text), [&](beast::error_code e, std::size_t) {
    ec = e;
    done = true;
  });
  if (!impl_->run(done, std::chrono::seconds(5))) throw std::runtime_error("ws send timed out");
  if (ec) throw std::runtime_error("ws send failed: " + ec.message());
}

void WsClient::send(const boost::json::object& message) { send(boost::json::serialize(message)); }

std::optional<boost::json::object> WsClient::next(std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  if (i.ended) return std::nullopt;
  if (!i.reading) {
    i.reading = true;
    i.read_done = false;
    i.ws.async_read(i.buffer, [&i](beast::error_code e, std::size_t) {
      i.read_ec = e;
      i.read_done = true;
      i.reading = false;
    });
  }
  if (!i.run(i.read_done, timeout)) return std::nullopt;
  if (i.read_ec) {
    Ended e;
    e.error = i.read_ec.message();
    // The close frame's code, when one arrived (the error may be the teardown's after it).
    if (i.ws.reason().code != websocket::close_code::none) {
      e.code = i.ws.reason().code;
      e.reason = std::string(i.ws.reason().reason.data(), i.ws.reason().reason.size());
    }
    i.ended = e;
    return std::nullopt;
  }
  std::string text = beast::buffers_to_string(i.buffer.data());
  i.buffer.consume(i.buffer.size());
  i.log("server", text);
  return boost::json::parse(text).as_object();
}

boost::json::object WsClient::expect(const std::string& type, const std::string& channel,
                                     std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto m = next(left);
    if (!m) break;
    if (m->at("type").as_string() != type) continue;
    if (!channel.empty() && (!m->contains("channel") || m->at("channel").as_string() != channel)) continue;
    return *m;
  }
  throw std::runtime_error("no \"" + type + "\" message" + (channel.empty() ? "" : " on " + channel) +
                           (impl_->ended ? " (the connection ended: " + impl_->ended->error + ")" : " in time"));
}

const std::optional<WsClient::Ended>& WsClient::ended() const { return impl_->ended; }

void WsClient::ping(const std::string& payload) {
  bool done = false;
  beast::error_code ec;
  impl_->ws.async_ping(websocket::ping_data(payload.c_str()), [&](beast::error_code e) {
    ec = e;
    done = true;
  });
  if (!impl_->run(done, std::chrono::seconds(5))) throw std::runtime_error("ws ping timed out");
  if (ec) throw std::runtime_error("ws ping failed: " + ec.message());
}

const std::vector<std::string>& WsClient::pongs() const { return impl_->pongs; }

const std::string& WsClient::extensions() const { return impl_->extensions; }

std::string WsClient::read_raw(std::chrono::milliseconds timeout, std::size_t max) {
  auto& i = *impl_;
  if (i.reading) throw std::logic_error("read_raw while a message read is pending");
  std::string out(max, '\0');
  bool done = false;
  std::size_t n = 0;
  auto& socket = beast::get_lowest_layer(i.ws).socket();
  socket.async_read_some(net::buffer(out), [&](beast::error_code, std::size_t got) {
    n = got;
    done = true;
  });
  if (!i.run(done, timeout)) {
    socket.cancel();
    i.run(done, std::chrono::seconds(5));
  }
  out.resize(n);
  return out;
}

void WsClient::close() {
  bool done = false;
  impl_->ws.async_close(websocket::close_code::normal, [&](beast::error_code) { done = true; });
  impl_->run(done, std::chrono::seconds(5));
}

void WsClient::kill() {
  beast::error_code ignored;
  auto& s = beast::get_lowest_layer(impl_->ws).socket();
  s.set_option(net::socket_base::linger(true, 0), ignored);  // a reset, like a crashed client
  s.close(ignored);
}

UpgradeAnswer upgrade(unsigned short port, const WsClient::Headers& headers) {
  WsClient::Impl impl;
  websocket::response_type res;
  try {
    impl.connect(port, headers, 0, &res);
  } catch (const std::exception&) {
    // A refused upgrade: `res` holds the server's answer.
  }
  UpgradeAnswer answer{res.result_int(), {}};
  for (const auto& field : res) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    answer.headers[name] = std::string(field.value());
  }
  return answer;
}

}  // namespace gpuex::test
