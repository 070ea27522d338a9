// Shared helpers for the matching tests: an engine driven by explicit time, order builders, event filters,
// and invariant checks after every command.
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "matching/engine.hpp"
#include "matching/money.hpp"

namespace gpuex::matching::test {

constexpr std::int64_t T0 = 1798761600;  // 2027-01-01T00:00:00Z
constexpr std::int64_t H = 3600;
constexpr std::int64_t D = 86400;

inline const AccountId kProvider{1};
inline const AccountId kProvider2{2};
inline const AccountId kBuyer{10};
inline const AccountId kBuyer2{11};
inline const AccountId kAdmin{99};
inline const MarketId kH100{"H100"};
inline const MarketId kA100{"A100"};

// USD with four decimals, e.g. usd4(20500) = 2.0500 USD = 2,050,000 micro-dollars.
inline Price usd4(std::int64_t ten_thousandths) { return Price(ten_thousandths * 100); }

inline PoolSpec pool_spec(std::int32_t gpus_per_node = 8, std::int32_t nodes = 2, Tier tier = Tier::bare_metal,
                          std::string region = "US") {
  PoolSpec s;
  s.market = kH100;
  s.region = std::move(region);
  s.tier = tier;
  s.gpus_per_node = gpus_per_node;
  s.nodes = nodes;
  s.nvlink = true;
  s.fabric = Fabric::infiniband;
  s.fabric_gbps = 400;
  s.sla_pct_x1000 = 99900;
  s.energy = EnergyAttributes{1400, 2000, 45000};  // not green
  return s;
}

inline OrderRequest sell(PoolId pool, Price price, std::int64_t qty, std::int64_t start, std::int64_t end) {
  OrderRequest r;
  r.side = Side::sell;
  r.pool = pool;
  r.price = price;
  r.quantity = Qty(qty);
  r.start = Seconds(start);
  r.end = Seconds(end);
  return r;
}

inline OrderRequest buy_window(Price price, std::int64_t qty, std::int64_t start, std::int64_t end,
                               MarketId market = kH100) {
  OrderRequest r;
  r.side = Side::buy;
  r.market = std::move(market);
  r.price = price;
  r.quantity = Qty(qty);
  r.start = Seconds(start);
  r.end = Seconds(end);
  return r;
}

inline OrderRequest buy_duration(Price price, std::int64_t qty, std::int64_t duration, MarketId market = kH100) {
  OrderRequest r;
  r.side = Side::buy;
  r.market = std::move(market);
  r.price = price;
  r.quantity = Qty(qty);
  r.duration = Seconds(duration);
  return r;
}

template <class T>
std::vector<T> of_type(const EventSink& events) {
  std::vector<T> out;
  for (const Event& e : events) {
    if (const T* v = std::get_if<T>(&e)) out.push_back(*v);
  }
  return out;
}

inline std::vector<Trade> trades_of(const EventSink& events) {
  std::vector<Trade> out;
  for (const TradeEvent& t : of_type<TradeEvent>(events)) out.push_back(t.trade);
  return out;
}

inline std::string dump(const EventSink& events) {
  std::string s;
  for (const Event& e : events) s += to_string(e) + "\n";
  return s;
}

class Fixture {
 public:
  explicit Fixture(EngineConfig cfg = default_config()) : engine_(std::move(cfg)) {}

  static EngineConfig default_config() {
    EngineConfig c;
    c.markets = {MarketSpec{kH100, Price(100), 1000}, MarketSpec{kA100, Price(100), 316}};
    return c;
  }

  Engine& engine() { return engine_; }
  Seconds now() const { return now_; }
  void at(std::int64_t t) { now_ = Seconds(t); }
  void advance(std::int64_t s) { now_ += Seconds(s); }
  Seq next_seq() const { return seq_ + 1; }

  // Applies one command at the current time; remembers every order and lease state seen.
  const EventSink& run(AccountId account, CommandBody body) {
    events_.clear();
    engine_.apply(Command{++seq_, now_, account, std::move(body)}, events_);
    for (const Event& e : events_) remember(e);
    check_invariants();
    return events_;
  }
  const EventSink& tick() { return run(kAdmin, Tick{}); }
  const EventSink& events() const { return events_; }

  PoolId add_pool(AccountId provider, const PoolSpec& spec = pool_spec()) {
    run(provider, AddPool{spec});
    return PoolId(seq_);
  }

  OrderId place(AccountId account, const OrderRequest& r) {
    run(account, PlaceOrder{r});
    return OrderId(seq_);
  }

  // The latest state seen of an order or lease (terminal ones included).
  const Order& order(OrderId id) const {
    auto it = orders_.find(id);
    REQUIRE(it != orders_.end());
    return it->second;
  }
  const Lease& lease(LeaseId id) const {
    auto it = leases_.find(id);
    REQUIRE(it != leases_.end());
    return it->second;
  }
  OrderStatus status(OrderId id) const { return order(id).status; }

  void check_invariants() {
    const std::string broken = engine_.check_invariants();
    INFO(dump(events_));
    REQUIRE(broken == "");
    const EngineState s = engine_.snapshot();
    for (const Order& o : s.open_orders) {
      if (o.is_buy()) {
        REQUIRE(o.filled + o.remaining == o.request.quantity);
      } else {
        REQUIRE(o.filled_gpu_seconds + o.lapsed_gpu_seconds + o.free_gpu_seconds + o.cancelled_gpu_seconds ==
                o.total_gpu_seconds);
      }
    }
    for (const Pool& p : s.pools) {
      const auto cap = engine_.pool_capacity(p.id, now_, now_ + Seconds(400 * D));
      REQUIRE(cap);
      REQUIRE(cap->unallocated.min(now_, now_ + Seconds(400 * D)) >= 0);
    }
  }

 private:
  void remember(const Event& e) {
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, OrderAccepted> || std::is_same_v<T, OrderRejected> ||
                        std::is_same_v<T, OrderUpdated> || std::is_same_v<T, OrderDone>) {
            orders_[v.order.id] = v.order;
          } else if constexpr (std::is_same_v<T, LeaseChanged>) {
            leases_[v.lease.id] = v.lease;
          }
        },
        e);
  }

  Engine engine_;
  Seq seq_{0};
  Seconds now_{T0};
  EventSink events_;
  std::map<OrderId, Order> orders_;
  std::map<LeaseId, Lease> leases_;
};

}  // namespace gpuex::matching::test
