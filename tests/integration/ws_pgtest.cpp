// /v1/ws against a real gpuexd and PostgreSQL, with real WebSocket clients (API.md "WebSocket").
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <csignal>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"
#include "support/ws_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr const char* kMarket = "H100-SXM-80G";
const std::string kBook = std::string("book:") + kMarket + ":spot";
const std::string kTrades = std::string("trades:") + kMarket;
const std::string kCandles = std::string("candles:") + kMarket + ":spot:1m";

std::string str(const json::value& v) { return std::string(v.as_string()); }

// A fresh exchange: admin, a provider, two buyers; `args` go to `gpuexd serve`.
struct Exchange : TestExchange {
  CreatedAccount provider = account("provider", "provide,read"), buyer = account("buyer", "trade,read"),
                 buyer2 = account("buyer2", "trade,read"), reader = account("reader", "trade");  // no read scope

  std::vector<std::string> args;

  explicit Exchange(std::vector<std::string> extra = {}) : args(std::move(extra)) {
    args.insert(args.end(), {"--key-rate", "100000", "--key-burst", "100000", "--ip-rate", "100000", "--ip-burst", "100000"});
    start(args);
  }

  // A new gpuexd on the same database (after the last one stopped or was killed).
  void restart() {
    http.reset();
    server.reset();
    start(args);
  }

  unsigned short port() const { return server->port(); }

  HttpReply send(const CreatedAccount& who, const std::string& method, const std::string& path,
                 const json::value& body = nullptr) {
    return call(who, method, path, body);
  }

  std::string pool(const std::string& tier = "bare_metal", int nodes = 10000) {
    auto r = send(provider, "POST", "/v1/pools",
                  json::object{{"market", kMarket}, {"region", "DE"}, {"tier", tier}, {"gpus_per_node", 8},
                               {"nodes", nodes}, {"pue", "1.2"}, {"renewable_pct", 50}, {"carbon_g_per_kwh", 200}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    return str(r.json().at("id"));
  }

  json::object ask(const std::string& pool_id, const std::string& price, int gpus) {
    auto r = send(provider, "POST", "/v1/orders",
                  json::object{{"side", "sell"}, {"pool_id", pool_id}, {"price", price}, {"quantity", gpus},
                               {"start", at(unix_now() - 60)}, {"end", at(unix_now() + 30 * 86400)}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    return r.json().as_object();
  }

  json::object bid(const CreatedAccount& who, const std::string& price, int gpus, bool interruptible = false,
                   int duration = 3600) {
    json::object body{{"side", "buy"}, {"market", kMarket}, {"price", price}, {"quantity", gpus},
                      {"duration", duration}};
    if (interruptible) body["interruptible"] = true;
    auto r = send(who, "POST", "/v1/orders", body);
    INFO(r.body);
    REQUIRE(r.status == 201);
    return r.json().as_object();
  }

  json::object book() {
    auto r = http->get(std::string("/v1/markets/") + kMarket + "/book?bucket=spot&depth=1000");
    REQUIRE(r.status == 200);
    return r.json().as_object();
  }

  std::size_t metric(const std::string& name) {
    auto text = http->get("/metrics").body;
    auto pos = text.find("\n" + name + " ");
    REQUIRE(pos != std::string::npos);
    return std::stoull(text.substr(pos + name.size() + 2));
  }

  std::size_t open_orders(const CreatedAccount& who) {
    auto r = send(who, "GET", "/v1/orders?status=open");
    REQUIRE(r.status == 200);
    return r.json().at("orders").as_array().size();
  }
};

std::string price(int ticks) {  // ticks of 0.0001
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%04d", ticks / 10000, ticks % 10000);
  return buf;
}

// A book rebuilt from a channel's snapshot and deltas, checking that seq grows by exactly one.
struct BookReplica {
  std::map<std::string, std::int64_t> bids, asks;
  json::value constrained;
  std::uint64_t seq = 0;
  bool have_snapshot = false;

  void apply(const json::object& m) {
    auto type = m.at("type").as_string();
    if (type == "snapshot") {
      bids.clear();
      asks.clear();
      for (const auto& l : m.at("bids").as_array()) bids[str(l.at(0))] = l.at(1).as_int64();
      for (const auto& l : m.at("asks").as_array()) asks[str(l.at(0))] = l.at(1).as_int64();
      constrained = m.at("constrained_bids");
      seq = m.at("seq").to_number<std::uint64_t>();
      have_snapshot = true;
    } else if (type == "delta") {
      REQUIRE(have_snapshot);
      auto next = m.at("seq").to_number<std::uint64_t>();
      REQUIRE(next == seq + 1);  // no gap, no repeat
      seq = next;
      for (const auto& c : m.at("changes").as_array()) {
        auto& side = c.at(0).as_string() == "buy" ? bids : asks;
        auto qty = c.at(2).as_int64();
        if (qty == 0) side.erase(str(c.at(1)));
        else side[str(c.at(1))] = qty;
      }
      constrained = m.at("constrained_bids");
    } else if (type == "heartbeat") {
      REQUIRE(m.at("seq").to_number<std::uint64_t>() == seq);
    }
  }

  // Reads `ws` until this replica reaches `target`.
  void follow(WsClient& ws, std::uint64_t target) {
    auto deadline = std::chrono::steady_clock::now() + 20s;
    while (seq < target || !have_snapshot) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      auto m = ws.next(1s);
      if (!m) continue;
      if (m->contains("channel") && m->at("channel").as_string() == kBook) apply(*m);
    }
  }

  void check_equals(const json::object& rest) {
    std::map<std::string, std::int64_t> rest_bids, rest_asks;
    for (const auto& l : rest.at("bids").as_array()) rest_bids[str(l.at(0))] = l.at(1).as_int64();
    for (const auto& l : rest.at("asks").as_array()) rest_asks[str(l.at(0))] = l.at(1).as_int64();
    CHECK(seq == rest.at("sequence").to_number<std::uint64_t>());
    CHECK(bids == rest_bids);
    CHECK(asks == rest_asks);
    CHECK(constrained == rest.at("constrained_bids"));
  }
};

WsClient authed(unsigned short port, const CreatedAccount& who) { return WsClient(port, bearer(who.api_key)); }

void subscribe(WsClient& ws, std::vector<std::string> channels) {
  json::array list;
  for (auto& c : channels) list.emplace_back(c);
  ws.send(json::object{{"op", "subscribe"}, {"channels", list}});
  auto reply = ws.expect("subscribed");
  CHECK(reply.at("channels").as_array() == list);
}

// Collects messages of one channel until `count` arrived, checking seq grows by one.
std::vector<json::object> collect(WsClient& ws, const std::string& channel, std::size_t count) {
  std::vector<json::object> out;
  std::uint64_t seq = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
    auto m = ws.next(1s);
    if (!m || m->at("type").as_string() == "heartbeat" || !m->contains("channel") ||
        m->at("channel").as_string() != channel) {
      continue;
    }
    auto s = m->at("seq").to_number<std::uint64_t>();
    if (seq != 0) REQUIRE(s == seq + 1);
    seq = s;
    out.push_back(*m);
  }
  return out;
}

}  // namespace

TEST_CASE("ws: a book channel's snapshot plus deltas equals the REST book under random load, and every trade print matches both fills") {
  Exchange x({"--ws-idle-ms", "600000"});  // the readers stay silent through the load
  auto pool_a = x.pool();
  auto pool_b = x.pool();

  WsClient market(x.port());
  subscribe(market, {kBook});
  WsClient tape(x.port());
  subscribe(tape, {kTrades});
  BookReplica early;
  early.apply(market.expect("snapshot", kBook));
  WsClient buyer_ws = authed(x.port(), x.buyer);
  WsClient buyer2_ws(x.port());
  buyer2_ws.send(json::object{{"op", "auth"}, {"key", x.buyer2.api_key}});
  CHECK(buyer2_ws.expect("auth").at("account_id").as_string() == x.buyer2.account_id);
  WsClient provider_ws = authed(x.port(), x.provider);
  for (auto* ws : {&buyer_ws, &buyer2_ws, &provider_ws}) subscribe(*ws, {"fills"});

  std::mt19937 rng(GENERATE(1u, 2u));
  std::vector<std::pair<const CreatedAccount*, std::string>> open;  // resting orders to cancel
  std::map<std::string, json::object> trades;                        // trade id -> the taker's fill
  std::unique_ptr<WsClient> late;                                     // subscribes halfway
  BookReplica late_book;
  for (int i = 0; i < 240; ++i) {
    if (i == 120) {
      late = std::make_unique<WsClient>(x.port());
      subscribe(*late, {kBook});
    }
    int what = static_cast<int>(rng() % 10);
    const CreatedAccount* who = &x.provider;
    json::object placed;
    if (what < 4) {
      placed = x.ask(rng() % 2 ? pool_a : pool_b, price(18000 + static_cast<int>(rng() % 20) * 100),
                     1 + static_cast<int>(rng() % 6));
    } else if (what < 8) {
      // Mostly below the asks; one in four crosses.
      who = rng() % 2 ? &x.buyer : &x.buyer2;
      int ticks = rng() % 4 == 0 ? 21000 : 15000 + static_cast<int>(rng() % 20) * 100;
      placed = x.bid(*who, price(ticks), 1 + static_cast<int>(rng() % 4));
    } else {
      if (open.empty()) continue;
      auto k = rng() % open.size();
      auto r = x.send(*open[k].first, "DELETE", "/v1/orders/" + open[k].second);
      INFO(r.body);
      CHECK((r.status == 200 || r.status == 404));  // it may have filled meanwhile
      open.erase(open.begin() + static_cast<long>(k));
      continue;
    }
    const auto& order = placed.at("order").as_object();
    if (order.at("status").as_string() == "open") open.emplace_back(who, str(order.at("id")));
    for (const auto& f : placed.at("fills").as_array()) trades[str(f.at("trade_id"))] = f.as_object();
  }
  REQUIRE(trades.size() > 5);  // the load must have traded to test anything

  auto rest = x.book();
  auto target = rest.at("sequence").to_number<std::uint64_t>();
  REQUIRE(target > 100);
  early.follow(market, target);
  early.check_equals(rest);
  late_book.follow(*late, target);
  late_book.check_equals(rest);
  CHECK(late_book.seq == early.seq);

  // Every print on trades:{market}, in order and without gaps, is one of the trades, and each
  // appears in the buyer's and the seller's private fills with the same terms.
  auto prints = collect(tape, kTrades, trades.size());
  REQUIRE(prints.size() == trades.size());
  std::set<std::string> printed;
  for (const auto& p : prints) printed.insert(str(p.at("trade").at("trade_id")));
  CHECK(printed.size() == trades.size());
  for (const auto& id : printed) CHECK(trades.count(id) == 1);

  std::map<std::string, json::object> buyer_fills, seller_fills;
  // Bids rest and asks cross them too, so count each buyer's trades from its own REST fills.
  for (auto* who : {&x.buyer, &x.buyer2}) {
    auto n = x.send(*who, "GET", "/v1/fills?limit=1000").json().at("fills").as_array().size();
    auto& ws = who == &x.buyer ? buyer_ws : buyer2_ws;
    for (const auto& m : collect(ws, "fills", n)) buyer_fills[str(m.at("fill").at("trade_id"))] = m.at("fill").as_object();
  }
  for (const auto& m : collect(provider_ws, "fills", trades.size())) {
    seller_fills[str(m.at("fill").at("trade_id"))] = m.at("fill").as_object();
  }
  REQUIRE(seller_fills.size() == trades.size());
  REQUIRE(buyer_fills.size() == trades.size());
  for (const auto& p : prints) {
    const auto& t = p.at("trade").as_object();
    auto id = str(t.at("trade_id"));
    INFO("trade " << id);
    for (const auto* side : {&buyer_fills, &seller_fills}) {
      const auto& f = side->at(id);
      CHECK(f.at("price") == t.at("price"));
      CHECK(f.at("quantity") == t.at("quantity"));
      CHECK(f.at("start") == t.at("start"));
      CHECK(f.at("end") == t.at("end"));
    }
    CHECK(buyer_fills.at(id).at("side").as_string() == "buy");
    CHECK(seller_fills.at(id).at("side").as_string() == "sell");
  }
}

TEST_CASE("ws: a channel joined after it has messages heartbeats its current seq, and the next message follows it") {
  Exchange x({"--ws-heartbeat-ms", "200"});
  auto pool = x.pool();
  WsClient early = authed(x.port(), x.buyer);
  subscribe(early, {kTrades, "fills"});
  x.ask(pool, "2.0000", 3);
  x.bid(x.buyer, "2.0000", 1);
  x.bid(x.buyer, "2.0000", 1);  // two trades: each channel is at seq 2
  // The seqs of the messages of `types` each channel sends `ws`, until `count` arrived on both.
  auto seqs = [](WsClient& ws, std::set<std::string> types, std::size_t count) {
    std::map<std::string, std::vector<std::int64_t>> out;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while ((out[kTrades].size() < count || out["fills"].size() < count) && std::chrono::steady_clock::now() < deadline) {
      auto m = ws.next(1s);
      if (m && types.count(str(m->at("type")))) out[str(m->at("channel"))].push_back(m->at("seq").as_int64());
    }
    return out;
  };
  const std::vector<std::int64_t> one_two{1, 2};
  auto first = seqs(early, {"trade", "fill"}, 2);
  CHECK(first[kTrades] == one_two);
  CHECK(first["fills"] == one_two);

  // A second connection of the same account joins both (the private one is shared by the account's
  // connections): its heartbeats carry seq 2, not 0, and the next trade arrives as 3 — no gap to see.
  WsClient late = authed(x.port(), x.buyer);
  subscribe(late, {kTrades, "fills"});
  auto beats = seqs(late, {"heartbeat"}, 1);
  CHECK(beats[kTrades].at(0) == 2);
  CHECK(beats["fills"].at(0) == 2);
  x.bid(x.buyer, "2.0000", 1);
  auto next = seqs(late, {"trade", "fill"}, 1);
  CHECK(next[kTrades].at(0) == 3);
  CHECK(next["fills"].at(0) == 3);
}

TEST_CASE("ws: a consumer that never reads is disconnected while another subscriber keeps receiving every delta") {
  Exchange x({"--ws-queue", "64"});
  auto pool = x.pool();
  WsClient slow(x.port(), {}, 4096);  // a small receive window, and it never reads after subscribing
  slow.send(json::object{{"op", "subscribe"}, {"channels", json::array{kBook}}});
  WsClient reader(x.port());
  subscribe(reader, {kBook});
  BookReplica replica;

  // Book changes until the server gives up on the slow reader (bounded), reading as we go.
  int placed = 0;
  for (; placed < 20000 && x.metric("gpuex_ws_slow_consumers_total") == 0; ++placed) {
    for (int k = 0; k < 20; ++k, ++placed) x.ask(pool, price(20000 + placed % 5000), 1);
    while (auto m = reader.next(0ms)) replica.apply(*m);
  }
  INFO("asks placed: " << placed);
  REQUIRE(x.metric("gpuex_ws_slow_consumers_total") == 1);

  // The other subscriber saw every delta, in order, up to the book's current sequence.
  auto rest = x.book();
  replica.follow(reader, rest.at("sequence").to_number<std::uint64_t>());
  replica.check_equals(rest);

  // The slow one finds its connection ended once it reads what the kernel had buffered.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!slow.ended() && std::chrono::steady_clock::now() < deadline) slow.next(1s);
  REQUIRE(slow.ended());
  CHECK(x.server->log().find("closing a slow consumer") != std::string::npos);
}

TEST_CASE("ws: a reader that lets large messages pile up is closed by the queue's byte limit, long before its message limit") {
  Exchange x({"--ws-queue-bytes", "65536"});
  auto pool = x.pool();
  for (int i = 0; i < 400; ++i) x.ask(pool, price(30000 + i), 1);  // a deep book: ~10 KB per snapshot
  WsClient slow(x.port(), {}, 4096);
  // Subscribing again sends a fresh snapshot each time (how a client recovers from a gap); this one never reads.
  for (int i = 0; i < 40; ++i) slow.send(json::object{{"op", "subscribe"}, {"channels", json::array{kBook}}});
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (x.metric("gpuex_ws_slow_consumers_total") == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  CHECK(x.metric("gpuex_ws_slow_consumers_total") == 1);  // with 80 messages queued at most, of 4,096 allowed
  CHECK(x.server->log().find("closing a slow consumer") != std::string::npos);
}

TEST_CASE("ws: slow readers together are bounded too: past the total, those holding more than their share close, a reader that keeps up stays") {
  Exchange x({"--ws-queue-total-bytes", "131072"});  // each queue alone may hold 16 MiB
  auto pool = x.pool();
  for (int i = 0; i < 400; ++i) x.ask(pool, price(30000 + i), 1);  // a deep book: ~10 KB per snapshot
  WsClient reader(x.port());
  subscribe(reader, {kBook});
  BookReplica replica;
  std::vector<std::unique_ptr<WsClient>> slow;
  for (int c = 0; c < 3; ++c) {
    slow.push_back(std::make_unique<WsClient>(x.port(), WsClient::Headers{}, 4096));
    // Each asks for a fresh snapshot again and again and never reads: ~400 KB each, 1.2 MB together.
    for (int i = 0; i < 40; ++i) slow.back()->send(json::object{{"op", "subscribe"}, {"channels", json::array{kBook}}});
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (x.metric("gpuex_ws_slow_consumers_total") < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
  }
  CHECK(x.metric("gpuex_ws_slow_consumers_total") == 3);
  CHECK(x.metric("gpuex_ws_queued_bytes") <= 131072);
  // The reader that kept up still follows the book.
  x.ask(pool, price(40000), 1);
  auto rest = x.book();
  replica.follow(reader, rest.at("sequence").to_number<std::uint64_t>());
  replica.check_equals(rest);
  CHECK_FALSE(reader.ended().has_value());
}

TEST_CASE("ws: the dead man's switch cancels all of the account's open orders when its connection is killed") {
  Exchange x;
  auto pool = x.pool();
  auto ask = x.ask(pool, "3.0000", 4);  // the provider's order must survive
  for (const char* p : {"1.0000", "1.1000", "1.2000"}) x.bid(x.buyer, p, 2);
  x.bid(x.buyer2, "1.0500", 1);
  REQUIRE(x.open_orders(x.buyer) == 3);

  {
    WsClient ws = authed(x.port(), x.buyer);
    ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
    auto reply = ws.expect("cancel_on_disconnect");
    CHECK(reply.at("enabled").as_bool());
    ws.kill();
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (x.open_orders(x.buyer) > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  CHECK(x.open_orders(x.buyer) == 0);
  CHECK(x.open_orders(x.buyer2) == 1);
  CHECK(x.open_orders(x.provider) == 1);
  auto all = x.send(x.buyer, "GET", "/v1/orders?status=all").json();
  for (const auto& o : all.at("orders").as_array()) CHECK(o.at("status").as_string() == "cancelled");

  SECTION("switched off, a dropped connection cancels nothing") {
    x.bid(x.buyer, "1.0000", 1);
    WsClient ws = authed(x.port(), x.buyer);
    ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
    ws.expect("cancel_on_disconnect");
    ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", false}});
    CHECK_FALSE(ws.expect("cancel_on_disconnect").at("enabled").as_bool());
    // Nothing is left armed to fire, now or at the next start...
    auto armed = gpuex::store::PgConnection::connect(x.db.dsn())
                     .exec("SELECT count(*) FROM dead_mans_switches WHERE account_id = $1::bigint", {x.buyer.account_id});
    CHECK(armed.integer(0, 0) == 0);
    ws.kill();
    std::this_thread::sleep_for(500ms);  // ...and a wrong cancel had the time to happen
    CHECK(x.open_orders(x.buyer) == 1);
  }
}

TEST_CASE("ws: the dead man's switch outlives gpuexd: a graceful stop fires it, and so does the start after a crash") {
  Exchange x;
  for (const char* p : {"1.0000", "1.1000"}) x.bid(x.buyer, p, 2);
  x.bid(x.buyer2, "1.0500", 1);  // another account's order: never touched
  WsClient ws = authed(x.port(), x.buyer);
  ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
  REQUIRE(ws.expect("cancel_on_disconnect").at("enabled").as_bool());

  SECTION("a graceful stop cancels before the server exits") {
    REQUIRE(x.server->stop() == 0);
    CHECK(x.server->log().find("dead man's switch cancelled 2 orders of account " + x.buyer.account_id) !=
          std::string::npos);
    x.restart();
    CHECK(x.server->log().find("armed when the last run ended") == std::string::npos);  // nothing left over
    CHECK(x.open_orders(x.buyer) == 0);
  }
  SECTION("after kill -9 the next start cancels before it takes traffic") {
    x.server->process().signal(SIGKILL);
    x.server->process().wait(10s);
    x.restart();
    CHECK(x.server->log().find("account " + x.buyer.account_id + " was armed when the last run ended") !=
          std::string::npos);
    CHECK(x.open_orders(x.buyer) == 0);
    // Done once: the start after that finds nothing to cancel, and the buyer's new orders stay.
    x.bid(x.buyer, "1.0000", 1);
    REQUIRE(x.server->stop() == 0);
    x.restart();
    CHECK(x.open_orders(x.buyer) == 1);
  }
  SECTION("switched off before the crash, it stays off") {
    ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", false}});
    REQUIRE_FALSE(ws.expect("cancel_on_disconnect").at("enabled").as_bool());
    x.server->process().signal(SIGKILL);
    x.server->process().wait(10s);
    x.restart();
    CHECK(x.open_orders(x.buyer) == 2);
  }
  CHECK(x.open_orders(x.buyer2) == 1);
}

// The server lists every connection for its graceful stop, each before it runs. Listed after, an upgraded
// connection could be missed by a stop (its dead man's switch then did not fire), and the HTTP session it
// replaced, listed once the upgrade was over, stayed listed for good: the stop waited its whole grace.
// About every other upgrade left such an entry, so 20 leave one all but surely when the order is wrong.
TEST_CASE("ws: connections that were upgraded and ended leave nothing behind for a graceful stop to wait for") {
  Exchange x;
  for (int i = 0; i < 20; ++i) {
    WsClient ws(x.port());
    ws.send(json::object{{"op", "ping"}});
    ws.expect("pong");
  }  // each closed by its client here
  REQUIRE(x.server->stop() == 0);
  // Logged only when the grace ran out with connections still listed.
  CHECK(x.server->log().find("connections still open") == std::string::npos);
}

TEST_CASE("ws: a dead man's switch's cancel and the deletion of its row commit together or not at all") {
  Exchange x;
  for (const char* p : {"1.0000", "1.1000"}) x.bid(x.buyer, p, 2);
  auto db = gpuex::store::PgConnection::connect(x.db.dsn());
  auto armed = [&db] { return db.exec("SELECT count(*) FROM dead_mans_switches").integer(0, 0); };
  // The store refuses to delete switches until the trigger is dropped.
  db.exec_script(R"sql(
    CREATE FUNCTION refuse_switch_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'switch deletes refused for the test'; END $$;
    CREATE TRIGGER refuse_switch_delete BEFORE DELETE ON dead_mans_switches
      FOR EACH ROW EXECUTE FUNCTION refuse_switch_delete();)sql");
  {
    WsClient ws = authed(x.port(), x.buyer);
    ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
    REQUIRE(ws.expect("cancel_on_disconnect").at("enabled").as_bool());
    REQUIRE(armed() == 1);
    ws.kill();
  }
  // The cancel-all's transaction failed with the deletion: no order was cancelled, the switch is armed.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (x.server->log().find("switch deletes refused for the test") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(x.server->log().find("switch deletes refused for the test") != std::string::npos);
  CHECK(x.open_orders(x.buyer) == 2);
  CHECK(armed() == 1);

  // Once the store takes the deletion, the retried cancel commits with it.
  db.exec_script("DROP TRIGGER refuse_switch_delete ON dead_mans_switches;");
  deadline = std::chrono::steady_clock::now() + 15s;
  while ((x.open_orders(x.buyer) > 0 || armed() > 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  CHECK(x.open_orders(x.buyer) == 0);
  CHECK(armed() == 0);
  // Nothing is left for the next start to cancel: the buyer's new order survives a restart.
  x.bid(x.buyer, "1.0000", 1);
  REQUIRE(x.server->stop() == 0);
  x.restart();
  CHECK(x.server->log().find("armed when the last run ended") == std::string::npos);
  CHECK(x.open_orders(x.buyer) == 1);
}

TEST_CASE("ws: a connection that falls silent is closed, and its dead man's switch fires") {
  Exchange x({"--ws-idle-ms", "1500", "--ws-heartbeat-ms", "200"});
  x.bid(x.buyer, "1.0000", 2);
  WsClient ws = authed(x.port(), x.buyer);
  subscribe(ws, {kTrades});
  ws.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", true}});
  ws.expect("cancel_on_disconnect");
  // Heartbeats on the idle channel repeat its seq (nothing traded: 0) while we stay silent.
  auto hb = ws.expect("heartbeat", kTrades);
  CHECK(hb.at("seq").as_int64() == 0);
  CHECK(hb.at("ts").as_int64() > 0);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ws.ended() && std::chrono::steady_clock::now() < deadline) ws.next(1s);
  REQUIRE(ws.ended());
  CHECK(ws.ended()->code == 1008);
  CHECK(ws.ended()->reason.find("idle") != std::string::npos);
  deadline = std::chrono::steady_clock::now() + 10s;
  while (x.open_orders(x.buyer) > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  CHECK(x.open_orders(x.buyer) == 0);
}

TEST_CASE("ws: private channels carry only the subscriber's own orders, fills and leases") {
  Exchange x;
  auto pool = x.pool();
  WsClient a = authed(x.port(), x.buyer);
  WsClient b = authed(x.port(), x.buyer2);
  WsClient p = authed(x.port(), x.provider);
  for (auto* ws : {&a, &b, &p}) subscribe(*ws, {"orders", "fills", "leases"});

  x.ask(pool, "2.0000", 8);
  auto a1 = x.bid(x.buyer, "2.5000", 2);   // trades
  auto b1 = x.bid(x.buyer2, "2.5000", 3);  // trades
  auto a2 = x.bid(x.buyer, "1.0000", 1);   // rests
  x.send(x.buyer, "DELETE", "/v1/orders/" + str(a2.at("order").at("id")));

  std::set<std::string> a_orders{str(a1.at("order").at("id")), str(a2.at("order").at("id"))};
  std::set<std::string> b_orders{str(b1.at("order").at("id"))};
  auto ids_of = [&](const CreatedAccount& who, const char* list) {
    std::set<std::string> out;
    auto body = x.send(who, "GET", std::string("/v1/") + list).json();
    for (const auto& o : body.at(list).as_array()) out.insert(str(o.at("id")));
    return out;
  };
  auto a_leases = ids_of(x.buyer, "leases");
  auto b_leases = ids_of(x.buyer2, "leases");
  REQUIRE(a_leases.size() == 1);
  REQUIRE(b_leases.size() == 1);

  // A: its two orders (accepted, filled / accepted, cancelled), one fill, its lease.
  auto check_stream = [&](WsClient& ws, const std::set<std::string>& orders, const std::set<std::string>& leases,
                          std::size_t fills) {
    std::size_t seen_fills = 0, seen_orders = 0, seen_leases = 0;
    while (auto m = ws.next(1500ms)) {
      auto type = str(m->at("type"));
      if (type == "order") {
        ++seen_orders;
        CHECK(orders.count(str(m->at("order").at("id"))) == 1);
      } else if (type == "fill") {
        ++seen_fills;
        CHECK(orders.count(str(m->at("fill").at("order_id"))) == 1);
      } else if (type == "lease") {
        ++seen_leases;
        CHECK(leases.count(str(m->at("lease").at("id"))) == 1);
        CHECK(m->at("lease").at("role").as_string() == "buyer");
      }
    }
    CHECK_FALSE(ws.ended().has_value());  // the stream went quiet: it did not end before a foreign message
    CHECK(seen_fills == fills);
    CHECK(seen_orders >= orders.size() * 2);
    CHECK(seen_leases >= 1);
  };
  check_stream(a, a_orders, a_leases, 1);
  check_stream(b, b_orders, b_leases, 1);

  // The provider sees both leases, as provider, and its own ask's fills.
  std::set<std::string> provider_leases;
  std::size_t provider_fills = 0;
  while (auto m = p.next(1500ms)) {
    if (m->at("type") == "lease") {
      CHECK(m->at("lease").at("role").as_string() == "provider");
      provider_leases.insert(str(m->at("lease").at("id")));
    }
    if (m->at("type") == "fill") {
      ++provider_fills;
      CHECK(m->at("fill").at("side").as_string() == "sell");
    }
  }
  CHECK_FALSE(p.ended().has_value());
  CHECK(provider_fills == 2);
  std::set<std::string> all_leases = a_leases;
  all_leases.insert(b_leases.begin(), b_leases.end());
  CHECK(provider_leases == all_leases);

  SECTION("private channels need a key, with the read scope") {
    WsClient anonymous(x.port());
    anonymous.send(json::object{{"op", "subscribe"}, {"channels", json::array{"orders"}}});
    auto e = anonymous.expect("error");
    CHECK(e.at("code").as_string() == "unauthenticated");
    WsClient no_read = authed(x.port(), x.reader);
    no_read.send(json::object{{"op", "subscribe"}, {"channels", json::array{"fills"}}});
    CHECK(no_read.expect("error").at("code").as_string() == "forbidden");
    CHECK(upgrade(x.port(), bearer("gpx_k_0000000000000000_" + std::string(64, '0'))).status == 401);
  }
}

TEST_CASE("ws: bad messages get an error that names the problem, limits are enforced, abuse closes the connection") {
  Exchange x({"--ws-max-subscriptions", "3"});
  WsClient ws(x.port());
  auto error_for = [&](const std::string& text) {
    ws.send(text);
    return ws.expect("error");
  };
  ws.send(json::object{{"op", "ping"}});
  CHECK(ws.expect("pong").at("ts").as_int64() > 0);
  CHECK(error_for("{not json").at("code").as_string() == "malformed_json");
  CHECK(error_for(R"({"op":"dance"})").at("code").as_string() == "invalid_field");
  CHECK(error_for(R"({"channels":[]})").at("code").as_string() == "missing_field");
  auto e = error_for(R"({"op":"subscribe","channels":["book:NOPE:spot"]})");
  CHECK(e.at("code").as_string() == "not_found");
  CHECK(e.at("channel").as_string() == "book:NOPE:spot");
  CHECK(error_for(R"({"op":"subscribe","channels":["book:H100-SXM-80G:2027-13"]})").at("code").as_string() ==
        "invalid_channel");
  CHECK(error_for(R"({"op":"subscribe","channels":["weather"]})").at("code").as_string() == "invalid_channel");
  {  // A field that is there but of the wrong type is invalid, not missing (on a connection of its own:
     // each error counts towards the abuse limit).
    WsClient other(x.port());
    auto other_error = [&](const std::string& text) {
      other.send(text);
      return std::string(other.expect("error").at("code").as_string());
    };
    CHECK(other_error(R"({"op":"auth"})") == "missing_field");
    CHECK(other_error(R"({"op":"auth","key":42})") == "invalid_field");
    CHECK(other_error(R"({"op":"cancel_on_disconnect"})") == "missing_field");
    CHECK(other_error(R"({"op":"cancel_on_disconnect","enabled":"yes"})") == "invalid_field");
    // Which op, which key? A name given twice is refused, not read as one of the copies.
    CHECK(other_error(R"({"op":"ping","op":"subscribe","channels":[]})") == "malformed_json");
  }
  CHECK(error_for(R"({"op":"subscribe","channels":["trades:H100-SXM-80G"],"extra":1})").at("code").as_string() ==
        "unknown_field");
  subscribe(ws, {kTrades, kBook});
  ws.expect("snapshot", kBook);
  CHECK(error_for(R"({"op":"subscribe","channels":["book:H100-SXM-80G:2027-01","book:H100-SXM-80G:2027-02"]})")
            .at("code")
            .as_string() == "too_many_subscriptions");
  ws.send(json::object{{"op", "unsubscribe"}, {"channels", json::array{kTrades}}});
  CHECK(ws.expect("unsubscribed").at("channels").as_array() == json::array{kTrades});

  SECTION("a message over 16 KiB closes the connection with 1009") {
    ws.send(R"({"op":"ping","pad":")" + std::string(20000, 'x') + "\"}");
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!ws.ended() && std::chrono::steady_clock::now() < deadline) ws.next(1s);
    REQUIRE(ws.ended());
    INFO(ws.ended()->error);
    CHECK(ws.ended()->code == 1009);
  }
  SECTION("ten bad messages close the connection with 1008") {
    for (int i = 0; i < 10; ++i) ws.send("[]");
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!ws.ended() && std::chrono::steady_clock::now() < deadline) ws.next(1s);
    REQUIRE(ws.ended());
    CHECK(ws.ended()->code == 1008);
    CHECK(ws.ended()->reason == "too many bad messages");
  }
  SECTION("a plain GET of /v1/ws is told to upgrade") {
    auto r = x.http->get("/v1/ws");
    CHECK(r.status == 426);
    CHECK(r.json().at("error").at("code").as_string() == "upgrade_required");
  }
}

TEST_CASE("ws: channels nobody listens to any more are forgotten, so ever new names cannot grow the hub") {
  Exchange x;
  auto channels_gauge = [&] {
    auto text = x.http->get("/metrics").body;
    auto at = text.find("\ngpuex_ws_channels ");
    REQUIRE(at != std::string::npos);
    return std::stoll(text.substr(at + std::string("\ngpuex_ws_channels ").size()));
  };
  const auto before = channels_gauge();
  WsClient ws(x.port());
  for (int year = 2030; year < 2033; ++year) {
    std::vector<std::string> names;
    for (int month = 1; month <= 10; ++month) {
      names.push_back(std::string("book:") + kMarket + ":" + std::to_string(year) + "-" + (month < 10 ? "0" : "") +
                      std::to_string(month));
    }
    subscribe(ws, names);
    for (const auto& n : names) ws.expect("snapshot", n);
    CHECK(channels_gauge() == before + 10);
    json::array list(names.begin(), names.end());
    ws.send(json::object{{"op", "unsubscribe"}, {"channels", list}});
    ws.expect("unsubscribed");
    CHECK(channels_gauge() == before);
  }
  // A channel that comes back starts from the book's current state, as for any new subscriber.
  subscribe(ws, {std::string("book:") + kMarket + ":2030-01"});
  CHECK(ws.expect("snapshot", std::string("book:") + kMarket + ":2030-01").at("seq").as_int64() == 0);
}

TEST_CASE("ws: an auth and a subscribe sent together are answered in order, and a revoked key's connection is closed") {
  Exchange x;
  auto admin = x.account("ops", "admin");
  WsClient ws(x.port());
  // The key was never used on this server: its check goes to PostgreSQL while the subscribe waits.
  ws.send(json::object{{"op", "auth"}, {"key", x.buyer2.api_key}});
  ws.send(json::object{{"op", "subscribe"}, {"channels", json::array{"orders"}}});
  auto first = ws.next();
  REQUIRE(first);
  CHECK(first->at("type").as_string() == "auth");
  CHECK(first->at("account_id").as_string() == x.buyer2.account_id);
  auto second = ws.next();
  REQUIRE(second);
  CHECK(second->at("type").as_string() == "subscribed");
  CHECK(second->at("channels").as_array() == json::array{"orders"});

  // The account's other key places an order right after the revocation: the revoked key's connection
  // reads none of it, closed before the order's message would go out.
  auto issued = x.call(admin, "POST", "/v1/accounts/" + x.buyer2.account_id + "/keys", json::parse(R"({"scopes": ["trade"]})"));
  REQUIRE(issued.status == 201);
  CreatedAccount other{x.buyer2.account_id, "", std::string(issued.json().at("api_key").as_string())};
  REQUIRE(x.call(admin, "DELETE", "/v1/keys/" + x.buyer2.key_id).status == 200);
  x.bid(other, "1.0000", 1);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!ws.ended() && std::chrono::steady_clock::now() < deadline) {
    if (auto m = ws.next(1s)) CHECK(m->at("type").as_string() != "order");
  }
  REQUIRE(ws.ended());
  CHECK(ws.ended()->code == 1008);
  CHECK(ws.ended()->reason == "the API key was revoked");
}

TEST_CASE("ws: every message sent and received matches schema/ws.json") {
  Exchange x({"--ws-heartbeat-ms", "200"});
  auto path = scratch_path("ws-messages.jsonl");
  std::ofstream transcript(path);

  WsClient market(x.port());
  WsClient provider = authed(x.port(), x.provider);
  WsClient buyer(x.port());
  WsClient buyer2 = authed(x.port(), x.buyer2);
  for (auto* ws : {&market, &provider, &buyer, &buyer2}) ws->record(&transcript);

  subscribe(market, {kBook, kTrades, kCandles});
  market.expect("snapshot", kBook);
  CHECK(market.expect("candle", kCandles).at("candle").is_null());  // nothing traded yet
  market.expect("heartbeat", kTrades);
  market.send(json::object{{"op", "ping"}});
  market.expect("pong");
  market.send(json::object{{"op", "subscribe"}, {"channels", json::array{"orders"}}});
  market.expect("error");
  buyer.send(json::object{{"op", "auth"}, {"key", x.buyer.api_key}});
  buyer.expect("auth");
  subscribe(buyer, {"orders", "fills", "leases"});
  buyer.send(json::object{{"op", "cancel_on_disconnect"}, {"enabled", false}});
  buyer.expect("cancel_on_disconnect");

  // Preemption (docs/market-rules.md): the buyer holds a spot pool's 8 GPUs on an interruptible
  // lease at 1.00; buyer2 bids 2.00 for 4 of them, interruptible, and takes them after the notice.
  auto pool = x.pool("spot", 1);
  x.ask(pool, "1.0000", 8);
  x.bid(x.buyer, "1.0000", 8, true, 10 * 86400);
  auto taken = x.bid(x.buyer2, "2.0000", 4, true);
  REQUIRE(taken.at("fills").as_array().size() == 1);
  CHECK(taken.at("fills").at(0).at("price").as_string() == "1.0001");
  auto notice = buyer.expect("preempted", "leases");
  CHECK(notice.at("quantity").as_int64() == 4);
  market.expect("delta", kBook);
  CHECK_FALSE(market.expect("trade", kTrades).at("trade").at("preemption").as_bool());  // the buyer's
  CHECK(market.expect("trade", kTrades).at("trade").at("preemption").as_bool());        // buyer2's
  CHECK(market.expect("candle", kCandles).at("candle").at("trades").as_int64() >= 1);
  // A partial fill: buyer2's firm bid for 12 meets the 8 GPUs of a new pool (the spot pool is all leased,
  // and a firm bid never preempts); the rest rests, and the order message says so.
  subscribe(buyer2, {"orders"});
  x.ask(x.pool("bare_metal", 1), "3.0000", 8);
  auto partial = x.bid(x.buyer2, "3.0000", 12);
  CHECK(partial.at("order").at("status").as_string() == "partially_filled");
  // Its order messages: accepted (open), then updated by the fill.
  CHECK(buyer2.expect("order", "orders").at("order").at("status").as_string() == "open");
  CHECK(buyer2.expect("order", "orders").at("order").at("status").as_string() == "partially_filled");
  market.send(json::object{{"op", "unsubscribe"}, {"channels", json::array{kTrades}}});
  market.expect("unsubscribed");
  // Drain what else arrived (for a second: heartbeats never stop), so it is checked too.
  auto drain_until = std::chrono::steady_clock::now() + 1s;
  for (auto* ws : {&market, &provider, &buyer, &buyer2}) {
    while (std::chrono::steady_clock::now() < drain_until && ws->next(100ms)) {
    }
  }
  transcript.close();

  auto r = run_command({"/usr/bin/python3", std::string(GPUEX_SOURCE_DIR) + "/tests/contract/check_ws_messages.py",
                        std::string(GPUEX_SOURCE_DIR) + "/schema/ws.json", path});
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

namespace {

// "1.2345" -> 1234500 micro-dollars.
std::int64_t micros(const std::string& text) {
  auto dot = text.find('.');
  std::string frac = text.substr(dot + 1);
  frac.resize(6, '0');
  return std::stoll(text.substr(0, dot)) * 1'000'000 + std::stoll(frac);
}

}  // namespace

TEST_CASE("ws: a candles channel sends the current committed candle, equal to the trades made and to REST") {
  Exchange x;
  WsClient ws(x.port());
  auto error_for = [&](const std::string& channel) {
    ws.send(json::object{{"op", "subscribe"}, {"channels", json::array{json::value(channel)}}});
    return std::string(ws.expect("error").at("code").as_string());
  };
  CHECK(error_for("candles:NOPE:spot:1m") == "not_found");
  CHECK(error_for(std::string("candles:") + kMarket + ":spot:2m") == "invalid_channel");
  CHECK(error_for(std::string("candles:") + kMarket + ":2027-13:1m") == "invalid_channel");
  CHECK(error_for(std::string("candles:") + kMarket + ":spot") == "invalid_channel");

  // Trades all in one minute unless the machine stalls (checked below, not assumed).
  if (unix_now() % 60 > 40) std::this_thread::sleep_for(std::chrono::seconds(61 - unix_now() % 60));
  subscribe(ws, {kCandles});
  auto first = ws.expect("candle", kCandles);
  CHECK(first.at("candle").is_null());  // no trade yet in this minute
  std::uint64_t seq = first.at("seq").to_number<std::uint64_t>();

  auto pool = x.pool();
  x.ask(pool, "1.0000", 4);
  x.ask(pool, "1.2000", 4);
  x.ask(pool, "1.5000", 4);
  std::vector<json::object> fills;
  auto take = [&](const CreatedAccount& who, const std::string& p, int gpus, int duration) {
    auto placed = x.bid(who, p, gpus, false, duration);
    for (const auto& f : placed.at("fills").as_array()) fills.push_back(f.as_object());
  };
  take(x.buyer2, "1.5000", 9, 3600);   // the three asks
  take(x.buyer, "1.2000", 3, 7200);    // rests: nothing at or below 1.2000 is left
  x.ask(pool, "1.1000", 2);            // crosses the resting bid
  take(x.buyer, "1.5000", 3, 1800);    // the rest of the 1.5000 ask
  REQUIRE(fills.size() >= 4);
  // The rested bid's trade is in the buyer's fills; fetch every fill of both buyers to have them all.
  fills.clear();
  for (const auto* who : {&x.buyer, &x.buyer2}) {
    auto r = x.send(*who, "GET", "/v1/fills?limit=100");
    INFO(r.body);
    REQUIRE(r.status == 200);
    auto body = r.json();
    for (const auto& f : body.at("fills").as_array()) fills.push_back(f.as_object());
  }

  // By hand from the fills: the trades of the last trade's minute, in time then trade id order.
  std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> trades;  // time, id, price, gpu s
  for (const auto& f : fills) {
    auto start = *gpuex::parse_rfc3339(str(f.at("start"))), end = *gpuex::parse_rfc3339(str(f.at("end")));
    trades.emplace_back(*gpuex::parse_rfc3339(str(f.at("time"))), std::stoll(str(f.at("trade_id"))),
                        micros(str(f.at("price"))), f.at("quantity").as_int64() * (end - start));
  }
  std::sort(trades.begin(), trades.end());
  std::int64_t minute = std::get<0>(trades.back()) / 60 * 60;
  std::int64_t open = -1, high = 0, low = INT64_MAX, close = 0, count = 0;
  std::int64_t gpu_s = 0, notional = 0;  // (small here: no overflow)
  for (const auto& [t, id, p, gs] : trades) {
    if (t < minute) continue;
    if (open < 0) open = p;
    high = std::max(high, p), low = std::min(low, p), close = p;
    gpu_s += gs, notional += p * gs, ++count;
  }
  // VWAP rounded half to even to a micro-dollar.
  auto q = static_cast<std::int64_t>(notional / gpu_s), rem = static_cast<std::int64_t>(notional % gpu_s);
  std::int64_t vwap = 2 * rem > gpu_s || (2 * rem == gpu_s && q % 2 != 0) ? q + 1 : q;
  INFO("trades in the minute: " << count << " of " << trades.size());
  CHECK(count == static_cast<std::int64_t>(trades.size()));  // (fails only if the machine stalled for ~20 s)

  // Candle messages follow, seq one up each, until one shows every trade of the minute.
  json::object last;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = ws.next(1s);
    if (!m || m->at("type").as_string() != "candle") continue;
    REQUIRE(m->at("seq").to_number<std::uint64_t>() == seq + 1);
    seq = m->at("seq").to_number<std::uint64_t>();
    last = *m;
    const auto& c = m->at("candle");
    if (c.is_object() && c.at("start").as_string() == at(minute) && c.at("trades").as_int64() == count) break;
  }
  REQUIRE(last.contains("candle"));
  const auto& candle = last.at("candle").as_object();
  INFO(json::serialize(candle));
  REQUIRE(candle.at("trades").as_int64() == count);
  CHECK(str(candle.at("start")) == at(minute));
  CHECK(micros(str(candle.at("open"))) == open);
  CHECK(micros(str(candle.at("high"))) == high);
  CHECK(micros(str(candle.at("low"))) == low);
  CHECK(micros(str(candle.at("close"))) == close);
  CHECK(micros(str(candle.at("vwap"))) == vwap);
  CHECK(micros(str(candle.at("volume_gpu_hours"))) == static_cast<std::int64_t>(gpu_s * 1'000'000 / 3600));
  CHECK(str(candle.at("open_normalized")) == str(candle.at("open")));  // H100 SXM: perf_factor 1

  // The same candle as the REST endpoint's for that minute.
  auto rest = x.http->get(std::string("/v1/markets/") + kMarket + "/candles?interval=1m&bucket=spot&from=" +
                          at(minute) + "&to=" + at(minute + 60));
  INFO(rest.body);
  REQUIRE(rest.status == 200);
  auto rest_body = rest.json();
  REQUIRE(rest_body.at("candles").as_array().size() == 1);
  CHECK(rest_body.at("candles").at(0) == last.at("candle"));

  // A late subscriber's first message is the current candle with the channel's current seq.
  WsClient late(x.port());
  subscribe(late, {kCandles});
  auto now = late.expect("candle", kCandles);
  CHECK(now.at("seq").to_number<std::uint64_t>() == seq);
  if (now.at("candle").is_null()) {
    CHECK(unix_now() >= minute + 60);  // the minute is over: no trade in the current one
  } else {
    CHECK(now.at("candle") == last.at("candle"));
  }
}

namespace {

// One WebSocket frame as it came off the socket, read by hand (RFC 6455 §5.2), independent of Beast.
struct RawFrame {
  bool fin = false;
  unsigned rsv = 0;     // RSV1-3: set only by a negotiated extension (RSV1: permessage-deflate)
  unsigned opcode = 0;  // 1 text, 8 close, 9 ping, 10 pong
  bool masked = false;  // a server never masks
  std::size_t header = 0;
  std::string payload;
};

// Takes every complete frame off the front of `bytes`; a partial one stays for the next read.
std::vector<RawFrame> take_frames(std::string& bytes) {
  auto byte = [&](std::size_t i) { return static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[i])); };
  std::vector<RawFrame> out;
  std::size_t at = 0;
  for (;;) {
    if (bytes.size() - at < 2) break;
    std::uint64_t len = byte(at + 1) & 0x7F;
    std::size_t header = 2;
    if (len == 126) {
      if (bytes.size() - at < 4) break;
      len = byte(at + 2) << 8 | byte(at + 3);
      header = 4;
    } else if (len == 127) {
      if (bytes.size() - at < 10) break;
      len = 0;
      for (std::size_t i = 0; i < 8; ++i) len = len << 8 | byte(at + 2 + i);
      header = 10;
    }
    bool masked = (byte(at + 1) & 0x80) != 0;
    if (masked) header += 4;
    if (bytes.size() - at < header + len) break;
    RawFrame f;
    f.fin = (byte(at) & 0x80) != 0;
    f.rsv = static_cast<unsigned>(byte(at) >> 4) & 7;
    f.opcode = static_cast<unsigned>(byte(at)) & 0xF;
    f.masked = masked;
    f.header = header;
    f.payload = bytes.substr(at + header, len);
    out.push_back(std::move(f));
    at += header + len;
  }
  bytes.erase(0, at);
  return out;
}

}  // namespace

TEST_CASE("ws: many frames in one TCP read are each a whole unmasked text frame, in seq order, uncompressed") {
  Exchange x;
  auto pool = x.pool();
  for (int i = 0; i < 20; ++i) x.ask(pool, price(30000 + i), 1);  // a snapshot over 125 bytes
  WsClient ws(x.port(), {}, 0, true);                               // offers permessage-deflate
  CHECK(ws.extensions().empty());                                   // ... which the server declines
  ws.send(json::object{{"op", "subscribe"}, {"channels", json::array{kBook}}});
  // Book changes while the client reads nothing: they wait in the socket, many frames together.
  for (int i = 0; i < 150; ++i) x.ask(pool, price(20000 + i), 1);
  auto rest = x.book();
  auto target = rest.at("sequence").to_number<std::uint64_t>();

  BookReplica replica;
  std::string bytes;
  std::size_t reads = 0, most_in_one_read = 0, frames = 0, long_frames = 0;
  std::uint64_t snapshot_seq = 0;
  bool subscribed = false;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (replica.seq < target || !replica.have_snapshot) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    bytes += ws.read_raw(1s);
    ++reads;
    auto got = take_frames(bytes);
    most_in_one_read = std::max(most_in_one_read, got.size());
    for (const auto& f : got) {
      ++frames;
      INFO("frame " << frames << ": " << f.payload);
      REQUIRE(f.fin);
      REQUIRE(f.rsv == 0);
      REQUIRE(f.opcode == 1);
      REQUIRE_FALSE(f.masked);
      if (f.header > 2) ++long_frames;
      auto m = json::parse(f.payload).as_object();
      if (!subscribed) {  // the reply to the subscribe comes first, then the snapshot
        REQUIRE(m.at("type").as_string() == "subscribed");
        subscribed = true;
        continue;
      }
      REQUIRE(m.at("channel").as_string() == kBook);
      if (!replica.have_snapshot) {
        REQUIRE(m.at("type").as_string() == "snapshot");
        snapshot_seq = m.at("seq").to_number<std::uint64_t>();
      }
      replica.apply(m);  // deltas whose seq grows by exactly one
    }
  }
  INFO(reads << " reads, " << frames << " frames");
  CHECK(bytes.empty());
  CHECK(replica.seq - snapshot_seq == 150);  // one delta per ask
  CHECK(most_in_one_read >= 2);
  CHECK(long_frames >= 1);  // the snapshot's 16-bit length
  replica.check_equals(rest);
}

TEST_CASE("ws: a client's ping frame gets its pong while a backlog streams, and every frame stays whole") {
  Exchange x({"--ws-send-buffer", "4096"});
  auto pool = x.pool();
  WsClient ws(x.port(), {}, 4096);  // a small window: the server's writes wait for our reads
  subscribe(ws, {kBook});
  BookReplica replica;
  replica.apply(ws.expect("snapshot", kBook));
  for (int i = 0; i < 300; ++i) x.ask(pool, price(20000 + i), 1);  // unread meanwhile
  ws.ping("gate-1");
  auto rest = x.book();
  replica.follow(ws, rest.at("sequence").to_number<std::uint64_t>());
  replica.check_equals(rest);
  // The backlog went out several frames per socket write (all that queued behind a write in flight).
  CHECK(x.metric("gpuex_ws_deliveries_total") == 301);
  CHECK(x.metric("gpuex_ws_writes_total") < 301);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (ws.pongs().empty() && std::chrono::steady_clock::now() < deadline) ws.next(100ms);
  CHECK(ws.pongs() == std::vector<std::string>{"gate-1"});
  ws.send(json::object{{"op", "ping"}});
  CHECK(ws.expect("pong").at("ts").as_int64() > 0);
  CHECK_FALSE(ws.ended());
}

TEST_CASE("ws: a backlog of more frames than one sendmsg takes (IOV_MAX) goes out whole and in order") {
  Exchange x({"--ws-send-buffer", "4096"});
  auto pool = x.pool();
  WsClient ws(x.port(), {}, 4096);  // a small window: the backlog queues in gpuexd while we do not read
  subscribe(ws, {kBook});
  BookReplica replica;
  replica.apply(ws.expect("snapshot", kBook));
  // Unread meanwhile: 1,500 deltas (> 1,024 frames), on 700 levels (REST shows at most 1,000).
  for (int i = 0; i < 1500; ++i) x.ask(pool, price(20000 + i % 700), 1);
  auto rest = x.book();
  replica.follow(ws, rest.at("sequence").to_number<std::uint64_t>());  // every seq, none missing
  replica.check_equals(rest);
  CHECK_FALSE(ws.ended());
}

TEST_CASE("ws: a close code arrives intact after a backlog of frames") {
  Exchange x({"--ws-send-buffer", "4096"});
  auto pool = x.pool();
  WsClient ws(x.port(), {}, 4096);
  subscribe(ws, {kBook});
  BookReplica replica;
  replica.apply(ws.expect("snapshot", kBook));
  auto first = replica.seq;
  for (int i = 0; i < 300; ++i) x.ask(pool, price(20000 + i), 1);  // unread: a backlog
  for (int i = 0; i < 10; ++i) ws.send("[]");                       // ten bad messages: close 1008
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ws.ended() && std::chrono::steady_clock::now() < deadline) {
    auto m = ws.next(1s);
    if (m && m->contains("channel") && m->at("channel").as_string() == kBook) replica.apply(*m);
  }
  REQUIRE(ws.ended());
  INFO(ws.ended()->error);
  CHECK(ws.ended()->code == 1008);
  CHECK(ws.ended()->reason == "too many bad messages");
  CHECK(replica.seq > first);  // whole deltas, in order, came before the close frame
}
