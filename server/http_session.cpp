// See http_session.hpp. Modelled on Beast's advanced server: one strand per connection, the session
// kept alive by shared_from_this() in every handler, a timeout on every read and write.
#include "server/http_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/url/parse.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_server.hpp"
#include "server/ws_session.hpp"

namespace gpuex::http {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr auto kDrainTime = std::chrono::seconds(1);
constexpr auto kTlsHandshakeTime = std::chrono::seconds(10);

template <class Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, beast::tcp_stream>;

template <class Stream>
class HttpSession : public Session, public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  template <class... Args>
  HttpSession(HttpServer& server, std::string ip, Args&&... args)
      : stream_(std::forward<Args>(args)...), server_(server), ip_(std::move(ip)) {}

  ~HttpSession() override {
    if (!handed_over_) server_.remove_session(this, ip_);
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kIsTls<Stream>) {
        beast::get_lowest_layer(self->stream_).expires_after(kTlsHandshakeTime);
        self->stream_.async_handshake(net::ssl::stream_base::server,
                                      [self](beast::error_code ec) {
                                        if (ec) return;  // not a TLS client, or gone: nothing to say
                                        self->read();
                                      });
      } else {
        self->read();
      }
    });
  }

  void shutdown() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->closing_ = true;
      // Between requests: close now. Mid-request: the response goes out with Connection: close.
      if (!self->busy_) beast::get_lowest_layer(self->stream_).cancel();
    });
  }

 private:
  const ServerConfig& config() const { return server_.config(); }

  void read() {
    if (closing_) return close();
    ctx_.reset();
    parser_.emplace();
    parser_->body_limit(config().body_limit);
    parser_->header_limit(static_cast<std::uint32_t>(config().header_limit));
    // One deadline for the whole next request: an idle keep-alive connection or a slow sender
    // (slow loris) is closed when it passes.
    beast::get_lowest_layer(stream_).expires_after(config().read_timeout);
    // The header first: a client that sent "Expect: 100-continue" waits for our go-ahead before its body.
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                               self->on_header(ec);
                             });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read(ec);  // a body over the limit by its Content-Length is refused here, before it is sent
    const Request& req = parser_->get();
    if (auto refused = ambiguous(req)) {  // answered before any body is asked for or read
      started_ = Clock::now();
      busy_ = true;
      return fail_request(error_response(Status::bad_request, "malformed_request", *refused));
    }
    if (!parser_->is_done() && req.version() >= 11 && beast::iequals(req[bhttp::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      return net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                              [self = this->shared_from_this()](beast::error_code written, std::size_t) {
                                if (written) return self->close();
                                // The body's own deadline: the client waited for this answer.
                                beast::get_lowest_layer(self->stream_).expires_after(self->config().read_timeout);
                                self->read_body();
                              });
    }
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return on_read({});  // no body (a GET): no second read, no hop through the strand
    bhttp::async_read(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_read(ec);
    });
  }

  void on_read(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == net::error::operation_aborted ||
        ec == beast::error::timeout || ec == net::error::connection_reset || ec == net::error::eof ||
        ec == bhttp::error::partial_message) {
      return close();
    }
    started_ = Clock::now();
    busy_ = true;
    if (ec == bhttp::error::body_limit) {
      return fail_request(error_response(Status::payload_too_large, "body_too_large",
                                         "the request body is over " +
                                             std::to_string(config().body_limit / 1024) + " KiB"));
    }
    if (ec == bhttp::error::header_limit) {
      return fail_request(error_response(Status::request_header_fields_too_large, "headers_too_large",
                                         "the request headers are over " +
                                             std::to_string(config().header_limit / 1024) + " KiB"));
    }
    if (ec) {
      if (ec.category() != beast::error_code(bhttp::error::bad_target).category()) return close();  // socket error
      return fail_request(error_response(Status::bad_request, "malformed_request",
                                         "the request is not valid HTTP/1.1: " + ec.message()));
    }
    dispatch_request();
  }

  // /v1/ws: the connection becomes a WebSocket session, which takes this one's place in the server.
  void upgrade() {
    route_ = "/v1/ws";
    if (auto refused = server_.websocket()->refuse(parser_->get(), ip_)) return send(std::move(*refused));
    // The WebSocket session counts the upgrade in the metrics once its key, if any, was checked.
    ws::start_session(std::move(stream_), parser_->release(), ip_, server_, *server_.websocket(), this);
    handed_over_ = true;
  }

  // Why a request's header cannot be read one way only: an HTTP/1.1 request without a Host (RFC 9112 §3.2), or
  // a copy of a field that decides what the request does or as whom (a proxy that keeps the other copy would
  // read another request). Such a request is answered and the connection closed (fail_request).
  static std::optional<std::string> ambiguous(const Request& req) {
    if (req.version() >= 11 && req.count(bhttp::field::host) == 0) return "an HTTP/1.1 request needs a Host header";
    for (std::string_view name : {"Host", "Authorization", "Idempotency-Key"}) {
      if (req.count(name) > 1) return "the request has more than one " + std::string(name) + " header";
    }
    return std::nullopt;
  }

  // A request we will not route: answer it, then close without reading further.
  void fail_request(Response res) {
    closing_ = true;
    route_ = "(unrouted)";
    method_ = parser_->get().method_string();
    send(std::move(res));
  }

  void dispatch_request() {
    const Request& req = parser_->get();
    method_ = req.method_string();
    std::string_view target = req.target();
    // Beast lets through targets Boost.URL refuses (a bare '%', '{', bytes over 0x7F): refused here,
    // never read as a request without its query (a market-scoped cancel-all must not cancel everything).
    if (!boost::urls::parse_origin_form(target)) {
      route_ = "(unrouted)";
      return send(error_response(Status::bad_request, "malformed_request",
                                 "the request target is not a valid URL path and query (RFC 3986: percent-encode "
                                 "reserved and non-ASCII characters)"));
    }
    auto path = target.substr(0, target.find('?'));
    if (path == "/v1/ws" && server_.websocket()) return upgrade();
    auto match = server_.router().match(req.method(), path);
    route_ = match.pattern.empty() ? "(unknown)" : match.pattern;

    if (!match.handler) {
      if (match.allow.empty()) {
        return send(error_response(Status::not_found, "not_found", "no such route: " + std::string(path)));
      }
      auto res = error_response(Status::method_not_allowed, "method_not_allowed",
                                std::string(req.method_string()) + " is not allowed here; use " + match.allow);
      res.set(bhttp::field::allow, match.allow);
      return send(std::move(res));
    }

    ctx_.emplace(req, std::move(match.params), ip_, std::nullopt);
    // The handler may answer later from another thread (a database read); the answer hops back
    // onto this connection's strand.
    Respond respond = [self = this->shared_from_this()](Response res) {
      auto deliver = [self, res = std::move(res)]() mutable { self->send(std::move(res)); };
      if (auto* deferred = DeferredAnswers::current()) return deferred->add(self->stream_.get_executor(), std::move(deliver));
      net::post(self->stream_.get_executor(), std::move(deliver));
    };
    try {
      (*match.handler)(*ctx_, std::move(respond));
    } catch (const std::exception& e) {
      spdlog::error("http: {} {} failed: {}", req.method_string(), path, e.what());
      send(error_response(Status::internal_server_error, "internal_error", "the server failed this request"));
    }
  }

  void send(Response res) {
    server_.metrics().record_request(method_, route_, res.result_int(), Clock::now() - started_);
    bool keep_alive = !closing_ && !server_.stopping() && parser_->get().keep_alive();
    res.keep_alive(keep_alive);
    res.set(bhttp::field::server, "gpuexd/" GPUEX_VERSION);
    server_.set_rate_limit_headers(res, ip_);
    if (parser_->get().method() == bhttp::verb::head) {  // the headers GET would send, no body
      auto length = res.body().size();
      res.body().clear();
      res.content_length(length);
    }
    serialize(res, out_);
    beast::get_lowest_layer(stream_).expires_after(config().read_timeout);
    net::async_write(stream_, net::buffer(out_),
                     [self = this->shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
                       self->on_write(ec, keep_alive);
                     });
  }

  // The bytes Beast's serializer would write (start line, each field as "name: value", a blank line,
  // the body; every response has a Content-Length), built into one buffer the connection reuses.
  // Beast's serializer walks the same bytes through layers of buffer-sequence views on each write:
  // ~5 % of gpuexd's samples under the e2e bench (2026-11-30, session 7).
  static void serialize(const Response& res, std::string& out) {
    out.clear();
    out.reserve(256 + res.body().size());
    const unsigned version = res.version();
    out += "HTTP/";
    out += static_cast<char>('0' + version / 10);
    out += '.';
    out += static_cast<char>('0' + version % 10);
    out += ' ';
    const unsigned code = res.result_int();
    out += static_cast<char>('0' + code / 100);
    out += static_cast<char>('0' + code / 10 % 10);
    out += static_cast<char>('0' + code % 10);
    out += ' ';
    out += res.reason();
    out += "\r\n";
    for (const auto& field : res) {
      out += field.name_string();
      out += ": ";
      out += field.value();
      out += "\r\n";
    }
    out += "\r\n";
    out += res.body();
  }

  void on_write(beast::error_code ec, bool keep_alive) {
    busy_ = false;
    if (ec) return close();
    if (!keep_alive) {
      // The client may still be sending a body we refused: drain it briefly so it can read our
      // answer before the connection closes (a close with unread data sends a reset).
      if (!parser_->is_done()) return drain();
      return close();
    }
    read();
  }

  void drain() {
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ignored);
    beast::get_lowest_layer(stream_).expires_after(kDrainTime);
    drain_some();
  }

  void drain_some() {
    stream_.async_read_some(net::buffer(drain_buffer_),
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              if (ec) return self->close();
                              self->drain_some();
                            });
  }

  void close() {
    beast::error_code ignored;
    if constexpr (kIsTls<Stream>) {
      beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(2));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        beast::error_code e;
        beast::get_lowest_layer(self->stream_).socket().close(e);
      });
    } else {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stream_.socket().close(ignored);
    }
  }

  Stream stream_;
  HttpServer& server_;
  std::string ip_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<RequestContext> ctx_;  // the request being handled, until its response is written
  std::string out_;  // the response being written, as bytes
  std::array<char, 4096> drain_buffer_{};
  Clock::time_point started_{};
  std::string method_;
  std::string route_;
  bool handed_over_ = false;  // upgraded: the WebSocket session owns the connection now
  bool busy_ = false;     // a request is being handled or its response written
  bool closing_ = false;  // close after the current response
};

}  // namespace

namespace {
thread_local DeferredAnswers* current_deferred = nullptr;

template <class Stream, class... Args>
void start(HttpServer& server, std::string ip, Args&&... args) {
  auto session = std::make_shared<HttpSession<Stream>>(server, std::move(ip), std::forward<Args>(args)...);
  // Listed before it runs: one that upgraded or ended first would leave its entry behind for good.
  server.add_session(session);
  session->run();
}

}  // namespace

DeferredAnswers::DeferredAnswers() : outer_(current_deferred) { current_deferred = this; }

DeferredAnswers* DeferredAnswers::current() { return current_deferred; }

void DeferredAnswers::add(net::any_io_executor executor, std::function<void()> deliver) {
  answers_.push_back({std::move(executor), std::move(deliver)});
}

DeferredAnswers::~DeferredAnswers() {
  current_deferred = outer_;
  if (answers_.empty()) return;
  // Every connection's strand is on the server's one io_context: one post there, and each answer goes
  // to its strand from the I/O thread that runs it (a thread-local queue, no wake-up).
  using Strand = net::strand<net::io_context::executor_type>;
  const auto* strand = answers_.front().executor.target<Strand>();
  if (!strand) {  // not the sessions' executor: each as it comes
    for (auto& a : answers_) net::post(a.executor, std::move(a.deliver));
    return;
  }
  net::post(strand->get_inner_executor(), [answers = std::move(answers_)]() mutable {
    for (auto& a : answers) net::post(a.executor, std::move(a.deliver));
  });
}

void start_session(tcp::socket socket, net::ssl::context* tls, HttpServer& server, std::string ip) {
  if (tls) return start<beast::ssl_stream<beast::tcp_stream>>(server, std::move(ip), std::move(socket), *tls);
  start<beast::tcp_stream>(server, std::move(ip), std::move(socket));
}

}  // namespace gpuex::http
