// See ws_hub.hpp.
#include "server/ws_hub.hpp"

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <limits>

#include "server/analytics/rollups.hpp"
#include "server/wire.hpp"
#include "server/ws_uring.hpp"

namespace gpuex::ws {

using namespace matching;
namespace json = boost::json;

namespace {

constexpr std::string_view kind_name(Channel::Kind kind) {
  switch (kind) {
    case Channel::Kind::book: return "book";
    case Channel::Kind::trades: return "trades";
    case Channel::Kind::orders: return "orders";
    case Channel::Kind::fills: return "fills";
    case Channel::Kind::leases: return "leases";
    case Channel::Kind::candles: return "candles";
  }
  return "?";
}

std::string private_key(Channel::Kind kind, std::int64_t account) {
  return std::string(kind_name(kind)) + "#" + std::to_string(account);
}

}  // namespace

Message text_frame(std::string_view json) {
  std::string frame;
  frame.reserve(json.size() + 10);
  frame.push_back(static_cast<char>(0x81));  // FIN, text
  const std::uint64_t n = json.size();
  if (n < 126) {
    frame.push_back(static_cast<char>(n));
  } else if (n <= 0xFFFF) {
    frame.push_back(static_cast<char>(126));
    frame.push_back(static_cast<char>(n >> 8));
    frame.push_back(static_cast<char>(n & 0xFF));
  } else {
    frame.push_back(static_cast<char>(127));
    for (int shift = 56; shift >= 0; shift -= 8) frame.push_back(static_cast<char>((n >> shift) & 0xFF));
  }
  frame.append(json);
  return std::make_shared<const std::string>(std::move(frame));
}

std::string Channel::key() const { return is_private() ? private_key(kind, account) : name; }

std::variant<Channel, ChannelError> parse_channel(std::string_view name,
                                                  const MarketTable& markets,
                                                  std::int64_t account, bool may_read) {
  Channel c;
  c.name = std::string(name);
  auto colon = name.find(':');
  auto head = name.substr(0, colon);
  auto market_known = [&](std::string_view m) { return markets.count(m) > 0; };

  if (head == "orders" || head == "fills" || head == "leases") {
    if (colon != std::string_view::npos) {
      return ChannelError{"invalid_channel", "private channels take no arguments: subscribe to \"" +
                                                 std::string(head) + "\""};
    }
    if (account == 0) {
      return ChannelError{"unauthenticated", "channel " + c.name + " needs an API key: send {\"op\":\"auth\"} first"};
    }
    if (!may_read) return ChannelError{"forbidden", "channel " + c.name + " needs a key with the read scope"};
    c.kind = head == "orders" ? Channel::Kind::orders : head == "fills" ? Channel::Kind::fills : Channel::Kind::leases;
    c.account = account;
    return c;
  }
  if (head == "trades" && colon != std::string_view::npos) {
    auto market = name.substr(colon + 1);
    if (!market_known(market)) return ChannelError{"not_found", "no such market: " + std::string(market)};
    c.kind = Channel::Kind::trades;
    c.market = MarketId{std::string(market)};
    return c;
  }
  if (head == "book" && colon != std::string_view::npos) {
    auto rest = name.substr(colon + 1);
    auto second = rest.find(':');
    if (second == std::string_view::npos) {
      return ChannelError{"invalid_channel", "a book channel is book:{market}:{bucket}, e.g. book:H100-SXM-80G:spot"};
    }
    auto market = rest.substr(0, second);
    if (!market_known(market)) return ChannelError{"not_found", "no such market: " + std::string(market)};
    auto bucket = wire::parse_bucket(rest.substr(second + 1));
    if (!bucket) {
      return ChannelError{"invalid_channel", "the bucket of " + c.name + " must be spot or a month such as 2027-01"};
    }
    c.kind = Channel::Kind::book;
    c.market = MarketId{std::string(market)};
    c.bucket = *bucket;
    return c;
  }
  if (head == "candles" && colon != std::string_view::npos) {
    auto rest = name.substr(colon + 1);
    auto second = rest.find(':');
    auto third = second == std::string_view::npos ? second : rest.find(':', second + 1);
    if (third == std::string_view::npos) {
      return ChannelError{"invalid_channel",
                          "a candles channel is candles:{market}:{bucket}:{interval}, e.g. candles:H100-SXM-80G:spot:1m"};
    }
    auto market = rest.substr(0, second);
    if (!market_known(market)) return ChannelError{"not_found", "no such market: " + std::string(market)};
    auto bucket = wire::parse_bucket(rest.substr(second + 1, third - second - 1));
    if (!bucket) {
      return ChannelError{"invalid_channel", "the bucket of " + c.name + " must be spot or a month such as 2027-01"};
    }
    auto interval = analytics::parse_interval(rest.substr(third + 1));
    if (!interval) return ChannelError{"invalid_channel", "the interval of " + c.name + " must be 1m, 5m, 1h or 1d"};
    c.kind = Channel::Kind::candles;
    c.market = MarketId{std::string(market)};
    c.bucket = *bucket;
    c.interval = *interval;
    return c;
  }
  return ChannelError{"invalid_channel", "unknown channel \"" + c.name +
                                             "\"; channels are book:{market}:{bucket}, trades:{market}, "
                                             "candles:{market}:{bucket}:{interval}, orders, fills, leases"};
}

Hub::Hub(BookViews& views, std::function<std::int64_t()> clock_ms) : views_(views), clock_ms_(std::move(clock_ms)) {}

void Hub::subscribe(const Channel& channel, const std::shared_ptr<Subscriber>& subscriber) {
  std::unique_lock lock(mutex_);
  auto [it, fresh] = channels_.try_emplace(channel.key());
  Listeners& l = it->second;
  if (fresh) l.channel = channel;
  auto same = [&](const auto& w) {
    auto s = w.lock();
    return !s || s == subscriber;
  };
  std::erase_if(l.subscribers, same);
  std::erase_if(l.waiting, same);
  if (channel.kind == Channel::Kind::candles && candle_feed_) {
    // The first message is the current candle, read by the publisher (never under this lock).
    l.waiting.push_back(subscriber);
    lock.unlock();
    const std::int64_t now = clock_ms_() / 1000;
    candle_feed_({channel.market, channel.bucket, now, now, true});
    return;
  }
  if (channel.kind == Channel::Kind::book) {
    // The snapshot and the deltas after it come from the same lock: no overlap, no gap.
    Depth d = views_.get(channel.market, channel.bucket, std::numeric_limits<std::size_t>::max());
    l.seq = d.sequence;
    json::object body{{"type", "snapshot"},
                      {"channel", channel.name},
                      {"seq", d.sequence},
                      {"ts", clock_ms_()},
                      {"bids", wire::levels_json(d.bids)},
                      {"asks", wire::levels_json(d.asks)},
                      {"constrained_bids", wire::constrained_json(d.constrained_bids)}};
    if (subscriber->deliver(channel, it->first, d.sequence, text_frame(json::serialize(body)))) {
      to_wake_.push_back(subscriber);
    }
    ++stats_.messages;
    ++stats_.deliveries;
  } else {
    subscriber->joined(it->first, l.seq);
  }
  l.subscribers.push_back(subscriber);
  wake_all(lock);
}

void Hub::deliver(const std::shared_ptr<Subscriber>& s, const Listeners& l, const std::string& key,
                  const Message& message) {
  if (s->deliver(l.channel, key, l.seq, message)) to_wake_.push_back(s);
  ++stats_.deliveries;
}

namespace {
thread_local Hub::DeferredWakes* current_deferred = nullptr;
}  // namespace

Hub::DeferredWakes::DeferredWakes(Hub& hub) : hub_(hub), outer_(current_deferred) { current_deferred = this; }

Hub::DeferredWakes::~DeferredWakes() {
  current_deferred = outer_;
  if (wake_.empty()) return;
  std::unique_lock lock(hub_.mutex_);
  hub_.wake(std::move(wake_), lock);
}

void Hub::wake_all(std::unique_lock<std::mutex>& lock) {
  if (to_wake_.empty()) return lock.unlock();
  if (DeferredWakes* deferred = current_deferred; deferred && &deferred->hub_ == this) {
    // (a session is listed once until its write starts: deliver() asks for one wake-up)
    deferred->wake_.insert(deferred->wake_.end(), std::make_move_iterator(to_wake_.begin()),
                           std::make_move_iterator(to_wake_.end()));
    to_wake_.clear();
    return lock.unlock();
  }
  auto wake_now = std::move(to_wake_);
  to_wake_.clear();
  to_wake_.reserve(wake_now.size());
  wake(std::move(wake_now), lock);
}

void Hub::wake(std::vector<std::shared_ptr<Subscriber>> sessions, std::unique_lock<std::mutex>& lock) {
  // At a quiet moment (the last wake-up at least kQuiet ago, and no fan-out work waiting for the I/O
  // threads), sessions with nothing in flight queue their writes on io_uring right here: no post and
  // strand handler per session. Under load their strands are woken instead: a strand's turn comes
  // later, by when more frames have queued, so its write carries more of them (cheaper per frame).
  const auto now = std::chrono::steady_clock::now();
  const bool quiet = now - last_wake_ >= kQuiet && UringHandoff::io_idle();
  last_wake_ = now;
  lock.unlock();
  std::optional<UringHandoff> handoff;
  if (quiet) handoff.emplace();
  for (const auto& s : sessions) s->wake();
}

void Hub::unsubscribe(const Channel& channel, const Subscriber* subscriber) {
  std::lock_guard lock(mutex_);
  auto it = channels_.find(channel.key());
  if (it == channels_.end()) return;
  auto same = [&](const auto& w) {
    auto s = w.lock();
    return !s || s.get() == subscriber;
  };
  std::erase_if(it->second.subscribers, same);
  std::erase_if(it->second.waiting, same);
  // A channel without listeners is forgotten, so that subscribing to ever new names cannot grow the
  // table; whoever joins it later starts from its current state (a book's view sequence, a new seq
  // for the others), as any new subscriber does.
  if (it->second.subscribers.empty() && it->second.waiting.empty()) channels_.erase(it);
}

void Hub::send(const std::string& key, std::string_view type, const MakeBody& make_body, std::optional<std::uint64_t> seq) {
  auto it = channels_.find(key);
  if (it == channels_.end()) return;
  Listeners& l = it->second;
  l.seq = seq ? *seq : l.seq + 1;
  if (l.subscribers.empty()) return;
  json::object body = make_body();
  body["type"] = type;
  body["channel"] = l.channel.name;
  body["seq"] = l.seq;
  body["ts"] = clock_ms_();
  auto message = text_frame(json::serialize(body));
  ++stats_.messages;
  std::size_t live = 0;
  for (std::size_t i = 0; i < l.subscribers.size(); ++i) {
    if (auto s = l.subscribers[i].lock()) {
      deliver(s, l, it->first, message);
      if (live != i) l.subscribers[live] = std::move(l.subscribers[i]);  // (a self-move would empty it)
      ++live;
    }
  }
  l.subscribers.resize(live);
}

void Hub::send_private(AccountId account, Channel::Kind kind, std::string_view type, const MakeBody& make_body) {
  send(private_key(kind, account.value), type, make_body);
}

bool Hub::has_candle_listeners(const std::string& market, const std::string& bucket) const {
  for (auto interval : analytics::kIntervals) {
    auto it = channels_.find("candles:" + market + ":" + bucket + ":" + std::string(analytics::interval_name(interval)));
    if (it != channels_.end() && (!it->second.subscribers.empty() || !it->second.waiting.empty())) return true;
  }
  return false;
}

void Hub::publish_candle(const MarketId& market, const Bucket& bucket, std::int64_t interval, json::value candle,
                         bool snapshot) {
  std::unique_lock lock(mutex_);
  auto it = channels_.find("candles:" + std::string(market.value()) + ":" + to_string(bucket) + ":" +
                           std::string(analytics::interval_name(interval)));
  if (it == channels_.end()) return;
  Listeners& l = it->second;
  if (snapshot && l.waiting.empty()) return;  // an update got there first
  if (!snapshot) ++l.seq;
  json::object body{{"type", "candle"},
                    {"channel", l.channel.name},
                    {"seq", l.seq},
                    {"ts", clock_ms_()},
                    {"candle", std::move(candle)}};
  auto message = text_frame(json::serialize(body));
  ++stats_.messages;
  std::vector<std::weak_ptr<Subscriber>> live;
  auto send_to = [&](std::vector<std::weak_ptr<Subscriber>>& list) {
    for (auto& w : list) {
      if (auto s = w.lock()) {
        deliver(s, l, it->first, message);
        live.push_back(std::move(w));
      }
    }
  };
  if (!snapshot) send_to(l.subscribers);
  else live = std::move(l.subscribers);
  send_to(l.waiting);
  l.waiting.clear();
  l.subscribers = std::move(live);
  wake_all(lock);
}

void Hub::publish(const store::Batch& batch) {
  std::unique_lock lock(mutex_);
  // (market, bucket) -> its trades' first and last times, for the candle channels that have listeners.
  std::map<std::pair<std::string, std::string>, CandleRequest> candles;
  for (const auto& logged : batch) {
    for (const auto& event : logged.events) {
      std::visit(
          [&](const auto& e) {
            using E = std::decay_t<decltype(e)>;
            if constexpr (std::is_same_v<E, BookDelta>) {
              views_.apply(e);
              send("book:" + std::string(e.market.value()) + ":" + to_string(e.bucket), "delta",
                   [&e] {
                     json::array changes;
                     for (const auto& c : e.changes) {
                       changes.push_back(json::array{json::value(to_string(c.side)),
                                                     json::value(wire::price_string(c.price)), json::value(c.quantity.value)});
                     }
                     return json::object{{"changes", std::move(changes)},
                                         {"constrained_bids", wire::constrained_json(e.constrained_bids)}};
                   },
                   e.sequence);
            } else if constexpr (std::is_same_v<E, TradeEvent>) {
              const Trade& t = e.trade;
              send("trades:" + std::string(t.market.value()), "trade", [&t] { return json::object{{"trade", wire::print_json(t)}}; });
              send_private(t.buyer, Channel::Kind::fills, "fill", [&t] { return json::object{{"fill", wire::fill_json(t, Side::buy)}}; });
              send_private(t.seller, Channel::Kind::fills, "fill", [&t] { return json::object{{"fill", wire::fill_json(t, Side::sell)}}; });
              if (candle_feed_) {
                auto key = std::pair{std::string(t.market.value()), to_string(t.bucket)};
                if (auto f = candles.find(key); f != candles.end()) {
                  f->second.include(t.time.value, t.time.value);
                } else if (has_candle_listeners(key.first, key.second)) {
                  candles.emplace(key, CandleRequest{t.market, t.bucket, t.time.value, t.time.value, false});
                }
              }
            } else if constexpr (std::is_same_v<E, OrderAccepted> || std::is_same_v<E, OrderRejected> ||
                                 std::is_same_v<E, OrderUpdated> || std::is_same_v<E, OrderDone>) {
              send_private(e.order.account, Channel::Kind::orders, "order",
                           [&e] { return json::object{{"order", wire::order_json(e.order)}}; });
            } else if constexpr (std::is_same_v<E, LeaseChanged>) {
              const Lease& l = e.lease;
              send_private(l.buyer, Channel::Kind::leases, "lease", [&l] { return json::object{{"lease", wire::lease_json(l, l.buyer)}}; });
              if (l.provider != l.buyer) {
                send_private(l.provider, Channel::Kind::leases, "lease",
                             [&l] { return json::object{{"lease", wire::lease_json(l, l.provider)}}; });
              }
            } else if constexpr (std::is_same_v<E, LeasePreempted>) {
              send_private(e.buyer, Channel::Kind::leases, "preempted", [&e] {
                return json::object{{"lease_id", std::to_string(e.lease.value)},
                                    {"quantity", e.quantity.value},
                                    {"preempted_at", wire::time_string(e.preempted_at)},
                                    {"ends_at", wire::time_string(e.ends_at)},
                                    {"by_trade", std::to_string(e.by_trade.value)}};
              });
            }
          },
          event);
    }
  }
  wake_all(lock);
  for (auto& [key, request] : candles) candle_feed_(std::move(request));
}

void Hub::reset(const Engine& engine) {
  std::lock_guard lock(mutex_);
  views_.reset(engine);
}

Hub::Stats Hub::stats() const {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  s.writes = writes_.load(std::memory_order_relaxed);
  s.queued_bytes = queued_bytes();
  s.channels = channels_.size();
  for (const auto& [key, l] : channels_) s.subscriptions += l.subscribers.size();
  return s;
}

}  // namespace gpuex::ws
