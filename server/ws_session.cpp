// See ws_session.hpp. One strand per connection (the socket's executor); the hub delivers from the
// store writer's completion thread into a queue guarded by a mutex, and the strand writes out everything queued
// with one gather write of the pre-built frames (ws_gate.hpp), then whatever queued meanwhile.
#include "server/ws_session.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "server/gate.hpp"
#include "server/http_server.hpp"
#include "server/json_fields.hpp"
#include "server/ws_gate.hpp"

namespace gpuex::ws {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr auto kCloseDeadline = std::chrono::seconds(2);  // a close handshake that takes longer is cut
constexpr auto kHandshakeTime = std::chrono::seconds(10);

Message make_message(const json::object& body) { return text_frame(json::serialize(body)); }

template <class NextLayer>
class WsSession : public http::Session,
                  public Subscriber,
                  public UringTarget,
                  public std::enable_shared_from_this<WsSession<NextLayer>> {
 public:
  WsSession(NextLayer stream, http::Request upgrade, std::string ip, HttpServer& server, Context& context)
      : ws_(std::move(stream)),
        upgrade_(std::move(upgrade)),
        ip_(std::move(ip)),
        server_(server),
        context_(context),
        timer_(ws_.get_executor()),
        close_deadline_(ws_.get_executor()),
        inbound_(context.config.ws_message_burst),
        started_(Clock::now()) {
    context_.hub.connection(+1);
  }

  ~WsSession() override {
    context_.hub.queued(-static_cast<std::int64_t>(queued_bytes_ + in_flight_bytes_));
    context_.hub.connection(-1);
    server_.remove_session(this, ip_);
  }

  void run() {
    net::dispatch(ws_.get_executor(), [self = this->shared_from_this()] { self->authenticate_upgrade(); });
  }

  void shutdown() override {
    net::post(ws_.get_executor(), [self = this->shared_from_this()] {
      self->close(websocket::close_code::going_away, "the server is shutting down");
    });
  }

  // From the hub, under its lock, on the writer's completion thread (or on this strand while subscribing).
  // Queues only; the hub calls wake() once after the batch when this returns true.
  bool deliver(const Channel&, const std::string& key, std::uint64_t seq, const Message& message) override {
    std::lock_guard lock(mutex_);
    auto it = subscriptions_.find(key);
    if (it == subscriptions_.end()) return false;  // unsubscribed meanwhile
    // A revoked key reads nothing more of its account, not even until the timer's next check. (A private
    // subscription exists only once principal_ is set, and it is never changed after.)
    if (it->second.channel.is_private() && context_.keys.revoked(principal_->key_id)) {
      if (!std::exchange(revoked_seen_, true)) {
        net::post(ws_.get_executor(), [self = this->shared_from_this()] {
          self->close(websocket::close_code::policy_error, "the API key was revoked");
        });
      }
      return false;
    }
    it->second.last_seq = seq;
    it->second.last_sent = Clock::now();
    it->second.started = true;
    return enqueue_locked(message, false);
  }

  void joined(const std::string& key, std::uint64_t seq) override {
    std::lock_guard lock(mutex_);
    auto it = subscriptions_.find(key);
    if (it != subscriptions_.end()) it->second.last_seq = seq;
  }

  // After the hub's batch, on its thread (or on this strand while subscribing). With a UringHandoff
  // there and nothing in flight, the write is queued on io_uring right here, without a trip through
  // the strand; otherwise the strand is woken to write.
  void wake() override {
    if constexpr (std::is_same_v<NextLayer, beast::tcp_stream>) {
      if (UringHandoff* handoff = UringHandoff::current()) {
        if (wake_direct(*handoff)) return;
      }
    }
    start_writing();
  }

  void post_flush(UringSender* sender) override {
    UringHandoff::posted();
    net::post(ws_.get_executor(), [sender] {
      UringHandoff::began();
      sender->flush();
    });
  }

 private:
  const ServerConfig& config() const { return context_.config; }

  struct Subscription {
    Channel channel;
    std::uint64_t last_seq = 0;
    Clock::time_point last_sent;
    // A candles subscription's first message (with the channel's seq) comes later, from the candle
    // publisher: no heartbeat before it, which would carry a seq the channel does not have.
    bool started = channel.kind != Channel::Kind::candles;
  };

  // ---- upgrade -------------------------------------------------------------------------------

  // An Authorization header on the upgrade authenticates the connection; a bad key is a plain 401.
  void authenticate_upgrade() {
    auto token = bearer_token(upgrade_);
    if (!token) return accept();
    context_.keys.authenticate(*token, [self = this->shared_from_this()](KeyStore::Outcome outcome, Principal p) {
      net::post(self->ws_.get_executor(), [self, outcome, p = std::move(p)]() mutable {
        switch (outcome) {
          case KeyStore::Outcome::ok:
            self->principal_ = std::move(p);
            return self->accept();
          case KeyStore::Outcome::throttled:
            return self->refuse_upgrade(rate_limited_response(self->context_.key_lookups.peek(self->ip_)));
          case KeyStore::Outcome::store_unavailable:
            return self->refuse_upgrade(http::error_response(http::Status::service_unavailable, "store_unavailable",
                                                             "the key cannot be checked: PostgreSQL does not answer"));
          case KeyStore::Outcome::unknown:
            return self->refuse_upgrade(
                http::error_response(http::Status::unauthorized, "unauthenticated", "unknown or revoked API key"));
        }
      });
    }, allow_key_lookup());
  }

  // A key the server has not seen costs a store lookup: limited per IP, as for HTTP requests (gate.cpp).
  std::function<bool()> allow_key_lookup() {
    return [this] { return context_.key_lookups.take(ip_).allowed; };
  }

  void refuse_upgrade(http::Response res) {
    res.keep_alive(false);
    server_.set_rate_limit_headers(res, ip_);
    record_upgrade(res.result_int());
    auto shared = std::make_shared<http::Response>(std::move(res));
    beast::get_lowest_layer(ws_).expires_after(kHandshakeTime);
    http::bhttp::async_write(ws_.next_layer(), *shared,
                             [self = this->shared_from_this(), shared](beast::error_code, std::size_t) {
                               beast::error_code ignored;
                               beast::get_lowest_layer(self->ws_).socket().shutdown(net::socket_base::shutdown_send,
                                                                                    ignored);
                               beast::get_lowest_layer(self->ws_).socket().close(ignored);
                               self->close_deadline_.cancel();  // a graceful stop's close() came first
                             });
  }

  void record_upgrade(unsigned status) {
    server_.metrics().record_request("GET", "/v1/ws", status, Clock::now() - started_);
  }

  void accept() {
    record_upgrade(101);
    // From here on the WebSocket layer keeps its own time: a handshake limit, and our idle check.
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout timeouts{kHandshakeTime, websocket::stream_base::none(), false};
    ws_.set_option(timeouts);
    // Runs during the accept only; `this` outlives it (a captured shared_ptr would keep the session alive).
    ws_.set_option(websocket::stream_base::decorator([this](websocket::response_type& res) {
      res.set(http::bhttp::field::server, "gpuexd/" GPUEX_VERSION);
      server_.set_rate_limit_headers(res, ip_);
    }));
    ws_.read_message_max(config().ws_message_limit);
    // What waits for a slow reader is bounded by our queue plus this, not by the kernel's autotuning.
    beast::error_code ignored;
    auto& socket = beast::get_lowest_layer(ws_).socket();
    if (config().ws_send_buffer > 0) socket.set_option(net::socket_base::send_buffer_size(config().ws_send_buffer), ignored);
    // Market data goes out as soon as it is published, not held back to coalesce small frames.
    socket.set_option(net::ip::tcp::no_delay(true), ignored);
    ws_.text(true);
    // Frames are built once for every subscriber, uncompressed: never negotiate permessage-deflate.
    websocket::permessage_deflate no_deflate;
    no_deflate.server_enable = false;
    no_deflate.client_enable = false;
    ws_.set_option(no_deflate);
    // Pings and pongs from the client count as signs of life.
    ws_.control_callback([this](websocket::frame_type, beast::string_view) { last_received_ = Clock::now(); });
    ws_.async_accept(upgrade_, [self = this->shared_from_this()](beast::error_code ec) {
      if (ec) return self->end();
      self->upgrade_ = {};
      self->accepted_ = true;
      self->last_received_ = Clock::now();
      self->read();
      self->arm_timer();
      // Closed during the handshake (a graceful stop): the close frame can go out now.
      if (self->close_asked()) self->start_close();
    });
  }

  // ---- reading ------------------------------------------------------------------------------

  void read() {
    ws_.async_read(in_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) return end();  // closed by either side, too big (Beast answered 1009), or the socket failed
    last_received_ = Clock::now();
    std::string text = beast::buffers_to_string(in_.data());
    in_.consume(in_.size());
    if (!closing()) handle(text, ws_.got_text());
    if (!switch_busy_ && !auth_busy_) read();  // else switch_answered() or the key check reads on
  }

  void handle(const std::string& text, bool is_text) {
    auto now = Clock::now();
    inbound_ = std::min(config().ws_message_burst,
                        inbound_ + config().ws_message_rate * std::chrono::duration<double>(now - inbound_at_).count());
    inbound_at_ = now;
    if (inbound_ < 1) return bad("rate_limited", "more than the allowed messages per second");
    inbound_ -= 1;
    if (!is_text) return bad("malformed_json", "messages are JSON text frames");
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) return bad("malformed_json", "a message is a JSON object such as {\"op\":\"ping\"}");
    if (auto repeated = repeated_key(text)) return bad("malformed_json", repeated->message(), repeated->field());
    const json::object& m = v.as_object();
    const json::value* op = m.if_contains("op");
    if (!op || !op->is_string()) return bad("missing_field", "every message needs an \"op\"", "op");
    std::string_view name = op->as_string();
    if (name == "ping") return reply({{"type", "pong"}, {"ts", context_.hub.now_ms()}});
    if (name == "subscribe") return subscribe(m);
    if (name == "unsubscribe") return unsubscribe(m);
    if (name == "auth") return auth(m);
    if (name == "cancel_on_disconnect") return cancel_on_disconnect(m);
    bad("invalid_field", "unknown op \"" + std::string(name) + "\"; ops are subscribe, unsubscribe, auth, ping, "
                             "cancel_on_disconnect", "op");
  }

  // Checks that `m` has only `allowed` fields; answers the first stranger.
  bool only_fields(const json::object& m, std::initializer_list<std::string_view> allowed) {
    for (const auto& [k, v] : m) {
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        bad("unknown_field", "unknown field \"" + std::string(k) + "\"", k);
        return false;
      }
    }
    return true;
  }

  // The channel names of a subscribe/unsubscribe, or nullopt after answering the error.
  std::optional<std::vector<std::string>> channel_names(const json::object& m) {
    if (!only_fields(m, {"op", "channels"})) return std::nullopt;
    const json::value* list = m.if_contains("channels");
    if (!list) {
      bad("missing_field", "\"channels\" lists the channels, e.g. [\"trades:H100-SXM-80G\"]", "channels");
      return std::nullopt;
    }
    if (!list->is_array() || list->as_array().empty()) {
      bad("invalid_field", "\"channels\" must be a non-empty array of channel names", "channels");
      return std::nullopt;
    }
    std::vector<std::string> names;
    for (const auto& c : list->as_array()) {
      if (!c.is_string() || c.as_string().size() > 200) {
        bad("invalid_field", "each channel is a string of at most 200 characters", "channels");
        return std::nullopt;
      }
      names.emplace_back(c.as_string());
    }
    if (names.size() > config().ws_max_subscriptions) {
      bad("too_many_subscriptions", "at most " + std::to_string(config().ws_max_subscriptions) +
                                        " channels per connection", "channels");
      return std::nullopt;
    }
    return names;
  }

  std::variant<Channel, ChannelError> parse(const std::string& name) const {
    return parse_channel(name, context_.markets, principal_ ? principal_->account_id : 0,
                         principal_ && has_scope(principal_->scopes, Scope::read));
  }

  void subscribe(const json::object& m) {
    auto names = channel_names(m);
    if (!names) return;
    std::vector<Channel> channels;
    std::set<std::string> added;
    {
      std::lock_guard lock(mutex_);
      for (const auto& name : *names) {
        auto parsed = parse(name);
        if (auto* err = std::get_if<ChannelError>(&parsed)) return bad_locked(err->code, err->message, "channels", name);
        auto& c = std::get<Channel>(parsed);
        if (!subscriptions_.count(c.key())) added.insert(c.key());
        channels.push_back(std::move(c));
      }
      if (subscriptions_.size() + added.size() > config().ws_max_subscriptions) {
        return bad_locked("too_many_subscriptions",
                          "at most " + std::to_string(config().ws_max_subscriptions) + " channels per connection",
                          "channels");
      }
      json::array listed;
      for (const auto& c : channels) listed.emplace_back(c.name);
      enqueue_locked(make_message({{"type", "subscribed"}, {"channels", std::move(listed)}}));
      for (const auto& c : channels) subscriptions_.insert_or_assign(c.key(), Subscription{c, 0, Clock::now(), c.kind != Channel::Kind::candles});
    }
    // Outside our lock: the hub takes its own and delivers (the book snapshot) into our queue.
    for (const auto& c : channels) context_.hub.subscribe(c, this->shared_from_this());
  }

  void unsubscribe(const json::object& m) {
    auto names = channel_names(m);
    if (!names) return;
    std::vector<Channel> removed;
    {
      std::lock_guard lock(mutex_);
      for (const auto& name : *names) {
        auto parsed = parse(name);
        if (auto* c = std::get_if<Channel>(&parsed)) {
          auto it = subscriptions_.find(c->key());
          if (it == subscriptions_.end()) continue;
          removed.push_back(it->second.channel);
          subscriptions_.erase(it);
        }
      }
    }
    json::array listed;
    for (const auto& c : removed) {
      context_.hub.unsubscribe(c, this);
      listed.emplace_back(c.name);
    }
    reply({{"type", "unsubscribed"}, {"channels", std::move(listed)}});
  }

  void auth(const json::object& m) {
    if (!only_fields(m, {"op", "key"})) return;
    const json::value* key = m.if_contains("key");
    if (!key) return bad("missing_field", "\"key\" is your API key", "key");
    if (!key->is_string()) return bad("invalid_field", "\"key\" must be a string: your API key", "key");
    if (principal_) return bad("already_authenticated", "this connection is already authenticated");
    // No further message is read until the key is checked: a subscribe to a private channel sent right
    // behind the auth is judged as authenticated.
    auth_busy_ = true;
    context_.keys.authenticate(key->as_string(), [self = this->shared_from_this()](KeyStore::Outcome outcome,
                                                                                 Principal p) {
      net::post(self->ws_.get_executor(), [self, outcome, p = std::move(p)]() mutable {
        self->auth_answered(outcome, std::move(p));
        self->auth_busy_ = false;
        if (!self->ended_) self->read();
      });
    }, allow_key_lookup());
  }

  void auth_answered(KeyStore::Outcome outcome, Principal p) {
    if (outcome == KeyStore::Outcome::store_unavailable) {
      return reply({{"type", "error"},
                    {"code", "store_unavailable"},
                    {"message", "the key cannot be checked: PostgreSQL does not answer"}});
    }
    if (outcome == KeyStore::Outcome::throttled) {
      return bad("rate_limited", "too many keys checked from this address: retry after " +
                                     std::to_string(context_.key_lookups.peek(ip_).retry_after_s) + " s");
    }
    if (outcome != KeyStore::Outcome::ok) return bad("unauthenticated", "unknown or revoked API key", "key");
    principal_ = std::move(p);
    reply(auth_reply());
  }

  json::object auth_reply() const {
    json::array scopes;
    for (auto s : {Scope::read, Scope::trade, Scope::provide, Scope::admin}) {
      if (has_scope(principal_->scopes, s)) scopes.emplace_back(scopes_to_string(static_cast<Scopes>(s)));
    }
    return {{"type", "auth"}, {"account_id", std::to_string(principal_->account_id)}, {"scopes", std::move(scopes)}};
  }

  // Arming or disarming writes to the store first (dead_mans_switches.hpp); this connection reads no
  // further message until the store answered, so the replies keep the order of the requests.
  void cancel_on_disconnect(const json::object& m) {
    if (!only_fields(m, {"op", "enabled"})) return;
    const json::value* enabled = m.if_contains("enabled");
    if (!enabled) return bad("missing_field", "\"enabled\" must be true or false", "enabled");
    if (!enabled->is_bool()) return bad("invalid_field", "\"enabled\" must be true or false", "enabled");
    if (!principal_) return bad("unauthenticated", "the dead man's switch needs an authenticated connection");
    if (!has_scope(principal_->scopes, Scope::trade) && !has_scope(principal_->scopes, Scope::provide)) {
      return bad("forbidden", "the dead man's switch needs a key with the trade or provide scope");
    }
    bool on = enabled->as_bool();
    if (on == switch_id_.has_value()) return reply({{"type", "cancel_on_disconnect"}, {"enabled", on}});
    switch_busy_ = true;
    auto self = this->shared_from_this();
    if (on) {
      return context_.switches.arm(principal_->account_id, [self](std::optional<std::int64_t> id) {
        net::post(self->ws_.get_executor(), [self, id] {
          self->switch_id_ = id;
          self->switch_answered(true, id.has_value());
        });
      });
    }
    context_.switches.disarm(*switch_id_, [self](bool ok) {
      net::post(self->ws_.get_executor(), [self, ok] {
        if (ok) self->switch_id_.reset();
        self->switch_answered(false, ok);
      });
    });
  }

  // Strand: the store answered a switch request (`done`: it took it).
  void switch_answered(bool enabled, bool done) {
    switch_busy_ = false;
    if (ended_) return fire_dead_mans_switch();  // the connection went meanwhile
    if (done) {
      reply({{"type", "cancel_on_disconnect"}, {"enabled", enabled}});
    } else {
      reply({{"type", "error"},
             {"code", "store_unavailable"},
             {"message", std::string("the dead man's switch was not ") + (enabled ? "armed" : "switched off") +
                             ": PostgreSQL does not answer"}});
    }
    read();
  }

  // A bad message is answered; after too many the connection is closed.
  void bad(std::string_view code, std::string_view message, std::string_view field = {}, std::string_view channel = {}) {
    {
      std::lock_guard lock(mutex_);
      bad_locked(code, message, field, channel);
    }
  }
  void bad_locked(std::string_view code, std::string_view message, std::string_view field = {},
                  std::string_view channel = {}) {
    json::object e{{"type", "error"}, {"code", code}, {"message", message}};
    if (!field.empty()) e["field"] = field;
    if (!channel.empty()) e["channel"] = channel;
    enqueue_locked(make_message(e));
    if (++bad_messages_ >= config().ws_bad_message_limit) {
      net::post(ws_.get_executor(), [self = this->shared_from_this()] {
        self->close(websocket::close_code::policy_error, "too many bad messages");
      });
    }
  }

  void reply(const json::object& body) {
    std::lock_guard lock(mutex_);
    enqueue_locked(make_message(body));
  }

  // ---- writing ------------------------------------------------------------------------------

  // Queues `message`. A write starts (one post to the strand) unless one is running or already
  // asked for; with `wake` false the caller does that later (start_writing) if this returns true.
  bool enqueue_locked(const Message& message, bool wake = true) {
    if (closing_) return false;
    const std::size_t mine = queued_bytes_ + in_flight_bytes_ + message->size();
    if (out_.size() + in_flight_ >= config().ws_queue_limit || mine > config().ws_queue_bytes || over_share(mine)) {
      // A reader this far behind is closed, not buffered without bound.
      closing_ = true;
      drop_queue_locked();
      net::post(ws_.get_executor(), [self = this->shared_from_this()] { self->close_slow_consumer(); });
      return false;
    }
    out_.push_back(message);
    queued_bytes_ += message->size();
    context_.hub.queued(static_cast<std::int64_t>(message->size()));
    if (writing_ || wake_pending_) return false;
    wake_pending_ = true;
    if (!wake) return true;
    start_writing();
    return false;
  }

  // When all queues together would pass --ws-queue-total-bytes, the connections holding more than an
  // equal share of it are the ones closed: readers that keep up hold little and are never picked.
  bool over_share(std::size_t mine) const {
    // The share first: it reads no counter that every write changes.
    const auto cap = config().ws_queue_total_bytes;
    const auto connections = static_cast<std::size_t>(std::max<std::int64_t>(1, context_.hub.connections()));
    if (mine <= cap / connections) return false;
    return static_cast<std::size_t>(std::max<std::int64_t>(0, context_.hub.queued_bytes())) + mine > cap;
  }

  // A closing connection's frames not yet written are dropped, and their bytes leave the total of all
  // queues at once (not at the session's end, up to kCloseDeadline later: until then they would count
  // against the other connections' share). mutex_ held.
  void drop_queue_locked() {
    out_.clear();
    context_.hub.queued(-static_cast<std::int64_t>(queued_bytes_));
    queued_bytes_ = 0;
  }

  // The queued frames become the write in flight; the bytes of the last write are gone. mutex_ held.
  void take_queue_locked() {
    context_.hub.queued(-static_cast<std::int64_t>(in_flight_bytes_));
    sending_.clear();
    sending_.swap(out_);
    in_flight_ = sending_.size();
    in_flight_bytes_ = queued_bytes_;
    queued_bytes_ = 0;
  }

  // wake() with a UringHandoff: true when the write was queued (or nothing is to be written).
  bool wake_direct(UringHandoff& handoff) {
    UringSender* sender = handoff.sender();
    if (!sender) return false;
    std::shared_ptr<UringTarget> self = this->shared_from_this();
    {
      std::lock_guard lock(mutex_);
      if (writing_ || out_.empty() || closing_) {  // the running write takes it, or there is nothing
        wake_pending_ = false;
        return true;
      }
      bool queued = ws_.next_layer().uring_claim(sender, self, [this]() -> const std::vector<net::const_buffer>& {
        writing_ = true;
        wake_pending_ = false;
        take_queue_locked();
        iov_.clear();
        for (const auto& m : sending_) iov_.emplace_back(m->data(), m->size());
        return iov_;
      });
      if (!queued) return false;  // the strand writes (wake_pending_ stays: start_writing clears it)
    }
    context_.hub.count_write();
    handoff.queued(self);
    return true;
  }

  // Any thread: the strand starts writing (unless it already is).
  void start_writing() {
    UringHandoff::posted();
    net::post(ws_.get_executor(), [self = this->shared_from_this()] {
      UringHandoff::began();
      {
        std::lock_guard lock(self->mutex_);
        self->wake_pending_ = false;
        if (self->writing_) return;
        self->writing_ = true;
      }
      self->write_next();
    });
  }

  // Strand: writes everything queued as one gather write; repeats until the queue is empty.
  void write_next() {
    for (int round = 0;; ++round) {
      if (round == 8) {  // a steady stream: let the other connections of this thread have a turn
        net::post(ws_.get_executor(), [self = this->shared_from_this()] { self->write_next(); });
        return;
      }
      {
        std::lock_guard lock(mutex_);
        if (out_.empty()) {
          write_over_locked();
          if (closing_ && close_code_) start_close();
          return;
        }
        take_queue_locked();
      }
      iov_.clear();
      for (const auto& m : sending_) iov_.emplace_back(m->data(), m->size());
      context_.hub.count_write();
      auto outcome = ws_.next_layer().write_frames(iov_, written_handler(), this->shared_from_this());
      if (outcome != FrameGate<NextLayer>::Outcome::written) return;  // its completion goes on
    }
  }

  // The gather write in flight is over (written, or lost with the connection); mutex_ held.
  void write_over_locked() {
    sending_.clear();
    in_flight_ = 0;
    context_.hub.queued(-static_cast<std::int64_t>(in_flight_bytes_));
    in_flight_bytes_ = 0;
    writing_ = false;
  }

  // What runs when the rest of a gather write went out asynchronously (or failed).
  typename FrameGate<NextLayer>::Done written_handler() {
    return [self = this->shared_from_this()](beast::error_code ec) {
      if (ec) {
        {
          std::lock_guard lock(self->mutex_);
          self->write_over_locked();
        }
        // Frames that could not be written are lost: the connection cannot go on without a gap.
        // (operation_aborted: a close frame went out, and the close handshake ends the session.)
        if (ec != net::error::operation_aborted) self->end();
        return;
      }
      self->write_next();
    };
  }

  // The gather write queued on io_uring was submitted (the thread that flushed, not the strand).
  // The common case — all written, nothing else queued meanwhile — ends the write here, without a
  // trip through the strand.
  void sent(int result) override {
    if (ws_.next_layer().uring_sent(result)) {
      std::unique_lock lock(mutex_);
      if (out_.empty() && !(closing_ && close_code_)) {
        write_over_locked();  // sending_ too: the strand touches it only while writing_
        return;
      }
      lock.unlock();
      net::post(ws_.get_executor(), [self = this->shared_from_this()] { self->write_next(); });
      return;
    }
    net::post(ws_.get_executor(), [self = this->shared_from_this(), result] {
      auto outcome = self->ws_.next_layer().uring_finish(self->iov_, result, self->written_handler());
      if (outcome == FrameGate<NextLayer>::Outcome::written) self->write_next();
    });
  }

  // ---- closing ------------------------------------------------------------------------------

  bool closing() {
    std::lock_guard lock(mutex_);
    return closing_;
  }

  void close_slow_consumer() {
    spdlog::info("ws: closing a slow consumer at {} (its queue reached {} messages or {} bytes, or more than its "
                 "share of {} bytes queued for all connections)",
                 ip_, config().ws_queue_limit, config().ws_queue_bytes, config().ws_queue_total_bytes);
    context_.hub.count_slow_consumer();
    close(websocket::close_code::policy_error, "slow consumer: the outbound queue is full");
  }

  // Starts closing with `code`: no more deliveries; the close frame follows what is being written;
  // a peer that does not finish the handshake within kCloseDeadline is cut off.
  void close(websocket::close_code code, std::string reason) {
    bool writing;
    {
      std::lock_guard lock(mutex_);
      if (close_code_) return;
      closing_ = true;
      drop_queue_locked();
      close_code_ = websocket::close_reason(code, reason);
      writing = writing_;
    }
    leave_hub();
    close_deadline_.expires_after(kCloseDeadline);
    close_deadline_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->close_socket();
    });
    // Before the handshake is done, the accept sends the close frame (Beast's close may not overlap it).
    if (!writing && accepted_) start_close();
  }

  // Strand: close() ran and nothing is being written, so the close frame can go out.
  bool close_asked() {
    std::lock_guard lock(mutex_);
    return close_code_ && !writing_;
  }

  void start_close() {
    if (close_sent_) return;
    close_sent_ = true;
    ws_.async_close(*close_code_, [self = this->shared_from_this()](beast::error_code) {});
  }

  void leave_hub() {
    std::map<std::string, Subscription> subs;
    {
      std::lock_guard lock(mutex_);
      subs.swap(subscriptions_);
    }
    for (const auto& [key, s] : subs) context_.hub.unsubscribe(s.channel, this);
  }

  // Strand: a send of ours still queued on io_uring goes to the kernel before the descriptor is freed.
  void close_socket() {
    ws_.next_layer().settle();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

  // The connection is over (either side closed it, or it failed): runs once.
  void end() {
    if (ended_) return;
    ended_ = true;
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
      drop_queue_locked();
    }
    leave_hub();
    timer_.cancel();
    close_deadline_.cancel();
    close_socket();
    // Also when the server stops: the client loses the connection all the same (API.md).
    if (!switch_busy_) fire_dead_mans_switch();
  }

  void fire_dead_mans_switch() {
    if (switch_id_) context_.switches.fire(principal_->account_id, *std::exchange(switch_id_, std::nullopt));
  }

  // ---- time: heartbeats and the idle limit ---------------------------------------------------

  void arm_timer() {
    auto period = std::clamp(std::min(config().ws_heartbeat, config().ws_idle_timeout) / 4,
                             std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    timer_.expires_after(period);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->ended_) return;
      self->on_timer();
    });
  }

  void on_timer() {
    auto now = Clock::now();
    if (now - last_received_ >= config().ws_idle_timeout) {
      return close(websocket::close_code::policy_error,
                   "idle: nothing received for " + std::to_string(config().ws_idle_timeout.count()) + " ms");
    }
    // A revoked key stops working at once, on connections it opened too (within one timer period).
    if (principal_ && context_.keys.revoked(principal_->key_id)) {
      return close(websocket::close_code::policy_error, "the API key was revoked");
    }
    {
      std::lock_guard lock(mutex_);
      if (closing_) return;
      for (auto& [key, s] : subscriptions_) {
        if (!s.started || now - s.last_sent < config().ws_heartbeat) continue;
        s.last_sent = now;
        enqueue_locked(make_message({{"type", "heartbeat"},
                                     {"channel", s.channel.name},
                                     {"seq", s.last_seq},
                                     {"ts", context_.hub.now_ms()}}));
      }
    }
    arm_timer();
  }

  websocket::stream<FrameGate<NextLayer>> ws_;
  http::Request upgrade_;
  std::string ip_;
  HttpServer& server_;
  Context& context_;
  net::steady_timer timer_;
  net::steady_timer close_deadline_;
  beast::flat_buffer in_;
  std::vector<Message> sending_;           // the frames of the write in flight
  std::vector<net::const_buffer> iov_;     // ... as buffers

  // Strand only.
  std::optional<Principal> principal_;
  std::optional<std::int64_t> switch_id_;  // the armed dead man's switch
  bool auth_busy_ = false;                 // a key check is in flight: reading waits for it
  bool switch_busy_ = false;               // the store has not answered a switch request yet
  bool ended_ = false;
  bool accepted_ = false;  // the WebSocket handshake is done
  bool close_sent_ = false;
  Clock::time_point last_received_ = Clock::now();
  double inbound_;  // tokens of the client-message rate limit
  Clock::time_point inbound_at_ = Clock::now();
  const Clock::time_point started_;  // the upgrade request's arrival here, for the metrics

  // Shared with the hub's thread.
  std::mutex mutex_;
  std::vector<Message> out_;  // queued, not yet handed to the socket
  std::size_t in_flight_ = 0;  // frames of the write in flight (count against the queue limit)
  std::size_t queued_bytes_ = 0;     // bytes of out_
  std::size_t in_flight_bytes_ = 0;  // bytes of the write in flight
  bool writing_ = false;       // the strand's write loop runs
  bool wake_pending_ = false;  // a post to start it is on its way
  bool closing_ = false;
  std::optional<websocket::close_reason> close_code_;
  std::map<std::string, Subscription> subscriptions_;
  unsigned bad_messages_ = 0;
  bool revoked_seen_ = false;  // deliver() found the key revoked and asked the strand to close
};

template <class NextLayer>
void start(NextLayer stream, http::Request upgrade, std::string ip, HttpServer& server, Context& context,
           http::Session* from) {
  auto session = std::make_shared<WsSession<NextLayer>>(std::move(stream), std::move(upgrade), ip, server, context);
  // Listed before it runs, on threads of its own: else a graceful stop could miss a connection that
  // already armed its dead man's switch (HttpServer::hand_over).
  server.hand_over(from, session);
  session->run();
}

// RFC 6455 §4.2.1: the key is 16 bytes in base64, i.e. 22 characters, the last of them carrying 2 bits
// (A, Q, g or w), then "==". Beast only asks that there be one.
bool is_handshake_key(std::string_view key) {
  if (key.size() != 24 || !key.ends_with("==")) return false;
  for (char c : key.substr(0, 22)) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/')) return false;
  }
  return std::string_view("AQgw").find(key[21]) != std::string_view::npos;
}

}  // namespace

std::optional<http::Response> Context::refuse(const http::Request& request, const std::string& ip) {
  if (!websocket::is_upgrade(request)) {
    auto res = http::error_response(http::Status::upgrade_required, "upgrade_required",
                                    "/v1/ws is a WebSocket endpoint: send a GET with Upgrade: websocket");
    res.set(http::bhttp::field::upgrade, "websocket");
    return res;
  }
  if (!is_handshake_key(request[http::bhttp::field::sec_websocket_key])) {
    return http::error_response(http::Status::bad_request, "malformed_request",
                                "Sec-WebSocket-Key must be 16 bytes in base64 (RFC 6455)");
  }
  auto d = per_ip.take(ip);
  if (d.allowed) return std::nullopt;
  return rate_limited_response(d);
}

void start_session(beast::tcp_stream stream, http::Request upgrade, std::string ip, HttpServer& server,
                   Context& context, http::Session* from) {
  boost::system::error_code ec;
  auto& socket = stream.socket();
  const auto protocol = socket.local_endpoint(ec).protocol();
  if (!context.io || ec) return start(std::move(stream), std::move(upgrade), std::move(ip), server, context, from);
  // The socket moves to Context::io (nothing is pending on it: the upgrade request was read, the answer
  // is the session's). If it cannot be taken over there, the session finds it closed and ends.
  const auto fd = socket.release(ec);
  beast::tcp_stream moved(net::make_strand(*context.io));
  if (!ec) {
    moved.socket().assign(protocol, fd, ec);
    if (ec) ::close(fd);
  }
  if (ec) spdlog::warn("ws: could not move a connection from {} to the WebSocket threads: {}", ip, ec.message());
  start(std::move(moved), std::move(upgrade), std::move(ip), server, context, from);
}

void start_session(beast::ssl_stream<beast::tcp_stream> stream, http::Request upgrade, std::string ip,
                   HttpServer& server, Context& context, http::Session* from) {
  start(std::move(stream), std::move(upgrade), std::move(ip), server, context, from);
}

}  // namespace gpuex::ws
