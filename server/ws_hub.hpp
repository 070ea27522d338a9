// The WebSocket hub: the channels of /v1/ws (API.md) and who listens to them. The store writer hands
// it every committed batch; it turns the batch's events into channel messages, each serialized once
// and shared by all of the channel's subscribers. It also owns the ordering of the published books:
// committed deltas reach the REST views and the book channels under one lock, so a subscriber's
// snapshot and the deltas after it never overlap or leave a gap. No Beast or Asio here.
#pragma once

#include <boost/json/object.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/book_views.hpp"
#include "server/store/writer.hpp"

namespace gpuex::ws {

// A server message as it goes on the wire: one complete WebSocket text frame (RFC 6455 §5.2: FIN,
// opcode 1, the payload length, no mask since servers do not mask; the JSON text). Built once and
// shared by every subscriber, which writes it as it is (permessage-deflate is never negotiated).
using Message = std::shared_ptr<const std::string>;
Message text_frame(std::string_view json);

// A channel a client named, checked. Private channels belong to the account that subscribed.
struct Channel {
  enum class Kind { book, trades, orders, fills, leases, candles };
  Kind kind{Kind::book};
  std::string name;             // as the client wrote it: "book:H100-SXM-80G:spot", "orders"
  matching::MarketId market;    // book, trades, candles
  matching::Bucket bucket;      // book, candles
  std::int64_t interval = 0;    // candles: seconds (60, 300, 3600, 86400)
  std::int64_t account = 0;     // orders, fills, leases

  bool is_private() const { return kind == Kind::orders || kind == Kind::fills || kind == Kind::leases; }
  // The hub's key: the name, plus the account for a private channel.
  std::string key() const;
};

// Why a channel name was refused: an error code of the socket protocol and a human message.
struct ChannelError {
  std::string code;  // "invalid_channel", "not_found", "unauthenticated", "forbidden"
  std::string message;
};

// Parses "book:{market}:{bucket}", "trades:{market}", "candles:{market}:{bucket}:{interval}", "orders",
// "fills", "leases". `account` is the
// authenticated account (0 if none) and `may_read` whether its key has the read scope.
std::variant<Channel, ChannelError> parse_channel(std::string_view name,
                                                  const MarketTable& markets,
                                                  std::int64_t account, bool may_read);

// A connection that listens. deliver() runs under the hub's lock (on the writer's completion thread, the candle
// publisher's thread, or in subscribe()): it must only queue the message, never block or call back
// into the hub. It returns true when the connection must be woken to write what queued; the hub
// then calls wake() once, after all the messages of the batch it is publishing were delivered (so
// one wake-up and one socket write carry them all).
class Subscriber {
 public:
  virtual ~Subscriber() = default;
  // `key` is channel.key(), computed once for all subscribers.
  virtual bool deliver(const Channel& channel, const std::string& key, std::uint64_t seq, const Message& message) = 0;
  // The channel's current seq as the subscriber joins a channel without a first message (trades and the
  // private ones): its heartbeats repeat it until the next message, which carries seq + 1.
  virtual void joined(const std::string& key, std::uint64_t seq) = 0;
  virtual void wake() = 0;
};

// A read of candles of (market, bucket), asked of the candle publisher (ws_candles.hpp): after trades
// of that pair committed (`snapshot` false; every period from the one holding the first trade's time
// `from` to the one holding the last's, `at`), or for new subscribers' first message (`snapshot` true,
// `from` = `at` = now). Unix seconds.
struct CandleRequest {
  matching::MarketId market;
  matching::Bucket bucket;
  std::int64_t from = 0;
  std::int64_t at = 0;
  bool snapshot = false;

  // Widens the range to cover [first, last] too.
  void include(std::int64_t first, std::int64_t last) {
    from = std::min(from, first);
    at = std::max(at, last);
  }
};

class Hub {
 public:
  // `clock_ms`: server time in Unix milliseconds (with any test-clock advance), the `ts` of messages.
  Hub(BookViews& views, std::function<std::int64_t()> clock_ms);

  // Adds `subscriber` to `channel` (a repeat replaces the old subscription); a book channel first
  // delivers its snapshot.
  void subscribe(const Channel& channel, const std::shared_ptr<Subscriber>& subscriber);
  void unsubscribe(const Channel& channel, const Subscriber* subscriber);

  // The writer's after-commit listener: applies committed book deltas to the views, then publishes.
  void publish(const store::Batch& batch);
  // After the engine was rebuilt (only committed state): the views are reset to it.
  void reset(const matching::Engine& engine);

  std::int64_t now_ms() const { return clock_ms_(); }

  // Where candle reads are asked for (set once, before the server serves; without one, candle
  // channels stay silent). Called outside the hub's lock; must only queue.
  void set_candle_feed(std::function<void(CandleRequest)> feed) { candle_feed_ = std::move(feed); }
  // The candle publisher's answer: the committed candle of `interval` seconds (null: no trade in
  // the period) for the channel candles:{market}:{bucket}:{interval}. An update (snapshot false)
  // counts the channel's seq up and goes to every subscriber; a snapshot goes, with the current seq,
  // only to subscribers still waiting for their first message.
  void publish_candle(const matching::MarketId& market, const matching::Bucket& bucket, std::int64_t interval,
                      boost::json::value candle, bool snapshot);

  // While one lives on a thread, the wake-ups of what the hub publishes on that thread wait for its end
  // (the messages are queued at once, in order; only the sessions' writes start later). The store
  // writer's completion scope holds them until the HTTP answers of the committed transaction went to
  // the I/O threads (app.cpp), so an order's answer is not queued behind the fan-out of its own change.
  class DeferredWakes {
   public:
    explicit DeferredWakes(Hub& hub);
    ~DeferredWakes();
    DeferredWakes(const DeferredWakes&) = delete;
    DeferredWakes& operator=(const DeferredWakes&) = delete;

   private:
    friend class Hub;
    Hub& hub_;
    DeferredWakes* outer_;
    std::vector<std::shared_ptr<Subscriber>> wake_;
  };

  // A connection was closed because it did not read fast enough.
  void count_slow_consumer() {
    std::lock_guard lock(mutex_);
    ++stats_.slow_consumers;
  }

  // A connection wrote its queued frames with one gather write (any thread, no lock).
  void count_write() { writes_.fetch_add(1, std::memory_order_relaxed); }

  // The outbound queues of all connections together (any thread, no lock): bytes queued or being
  // written (a message shared by several queues counts in each), and the connections open. They bound
  // the memory slow readers can hold all together (ws_session.cpp).
  void queued(std::int64_t bytes) { queued_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  std::int64_t queued_bytes() const { return queued_bytes_.load(std::memory_order_relaxed); }
  void connection(int opened) { connections_.fetch_add(opened, std::memory_order_relaxed); }
  std::int64_t connections() const { return connections_.load(std::memory_order_relaxed); }

  struct Stats {
    std::uint64_t messages = 0;        // messages built
    std::uint64_t deliveries = 0;      // messages handed to subscribers
    std::uint64_t slow_consumers = 0;  // connections closed for falling behind
    std::uint64_t writes = 0;          // socket writes of queued frames (one carries one or more)
    std::int64_t queued_bytes = 0;     // in all outbound queues
    std::size_t subscriptions = 0;
    std::size_t channels = 0;  // channels with listeners
  };
  Stats stats() const;

 private:
  struct Listeners {
    Channel channel;
    std::uint64_t seq = 0;  // the last message's (book channels: the view's sequence)
    std::vector<std::weak_ptr<Subscriber>> subscribers;
    std::vector<std::weak_ptr<Subscriber>> waiting;  // candles: subscribed, first message not yet sent
  };
  bool has_candle_listeners(const std::string& market, const std::string& bucket) const;
  // Builds and sends one message to the channel `key` if anyone listens; the body `make_body` returns
  // gets type, channel, seq and ts added. `seq` is the book's sequence, or nullopt to count one up.
  // The body is made only when the channel has subscribers: most committed events have none (the
  // order entry benchmark has no WebSocket client), and their documents cost the completion thread.
  using MakeBody = std::function<boost::json::object()>;
  void send(const std::string& key, std::string_view type, const MakeBody& make_body,
            std::optional<std::uint64_t> seq = std::nullopt);
  void send_private(matching::AccountId account, Channel::Kind kind, std::string_view type, const MakeBody& make_body);
  // Delivers under the lock; remembers who must be woken.
  void deliver(const std::shared_ptr<Subscriber>& s, const Listeners& l, const std::string& key,
               const Message& message);
  // Wakes them, after the lock was released (or hands them to this thread's DeferredWakes).
  void wake_all(std::unique_lock<std::mutex>& lock);
  void wake(std::vector<std::shared_ptr<Subscriber>> sessions, std::unique_lock<std::mutex>& lock);

  BookViews& views_;
  std::function<std::int64_t()> clock_ms_;
  mutable std::mutex mutex_;
  std::map<std::string, Listeners> channels_;
  std::function<void(CandleRequest)> candle_feed_;
  Stats stats_;
  std::vector<std::shared_ptr<Subscriber>> to_wake_;
  std::atomic<std::uint64_t> writes_{0};
  alignas(64) std::atomic<std::int64_t> queued_bytes_{0};  // changed by every queue and write: a line of its own
  alignas(64) std::atomic<std::int64_t> connections_{0};
  // When wake() last ran (see there): batches closer together than kQuiet are "under load".
  static constexpr auto kQuiet = std::chrono::milliseconds(10);
  std::chrono::steady_clock::time_point last_wake_{};
};

}  // namespace gpuex::ws
