// Order entry over real HTTP against a real PostgreSQL: cases written from DESIGN.md §4's rules.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <limits>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "server/store/writer.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;

namespace {


// A market with a provider, a buyer and an admin, on a fresh database and server.
struct Market : TestExchange {
  CreatedAccount admin = account("ops", "admin"), provider = account("provider", "provide,read"),
                 buyer = account("buyer", "trade,read"), other = account("other", "trade,provide,read");

  explicit Market(std::vector<std::string> args = {}) { start(std::move(args)); }

  HttpReply post(const CreatedAccount& who, const std::string& path, const json::value& body) {
    return call(who, "POST", path, body);
  }
  HttpReply get(const CreatedAccount& who, const std::string& path) { return call(who, "GET", path); }

  std::string pool(const std::string& region, int nodes = 2, const std::string& tier = "bare_metal") {
    auto r = post(provider, "/v1/pools",
                  {{"market", "H100-SXM-80G"}, {"region", region}, {"tier", tier}, {"gpus_per_node", 8},
                   {"nodes", nodes}, {"pue", "1.3"}, {"renewable_pct", 40}, {"carbon_g_per_kwh", 300}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    return std::string(r.json().at("id").as_string());
  }

  // An ask open from now (a start in the past is clipped to now) for 30 days.
  json::object ask(const std::string& pool_id, const char* price, int gpus) {
    auto r = post(provider, "/v1/orders",
                  {{"side", "sell"}, {"pool_id", pool_id}, {"price", price}, {"quantity", gpus},
                   {"start", at(unix_now() - 60)}, {"end", at(unix_now() + 30 * 86400)}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    return r.json().at("order").as_object();
  }

  json::value book(const std::string& bucket = "spot") {
    auto r = http->get("/v1/markets/H100-SXM-80G/book?bucket=" + bucket);
    REQUIRE(r.status == 200);
    return r.json();
  }
};

json::object spot_bid(const char* price, int gpus) {
  return {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", price}, {"quantity", gpus}, {"duration", 3600}};
}

std::string code(const HttpReply& r) { return std::string(r.json().at("error").at("code").as_string()); }

}  // namespace

TEST_CASE("a spot bid meets the cheapest ask first and trades at the ask's price") {
  Market m;
  auto de = m.pool("DE");
  auto us = m.pool("US");
  m.ask(de, "2.0000", 8);
  m.ask(us, "1.8000", 8);

  auto r = m.post(m.buyer, "/v1/orders", spot_bid("2.5000", 4));
  INFO(r.body);
  REQUIRE(r.status == 201);
  auto body = r.json();
  const auto& order = body.at("order").as_object();
  CHECK(order.at("status").as_string() == "filled");
  CHECK(order.at("filled_quantity").as_int64() == 4);
  CHECK(order.at("remaining_quantity").as_int64() == 0);
  const auto& fills = body.at("fills").as_array();
  REQUIRE(fills.size() == 1);
  CHECK(fills[0].at("price").as_string() == "1.8000");  // the resting ask's price, not the bid's limit
  CHECK(fills[0].at("quantity").as_int64() == 4);
  CHECK(fills[0].at("liquidity").as_string() == "taker");

  // The lease: 4 GPUs for an hour at 1.80 = USD 7.20 owed.
  auto leases = m.get(m.buyer, "/v1/leases").json().at("leases").as_array();
  REQUIRE(leases.size() == 1);
  CHECK(leases[0].at("role").as_string() == "buyer");
  CHECK(leases[0].at("quantity").as_int64() == 4);
  CHECK(leases[0].at("price").as_string() == "1.8000");
  CHECK(leases[0].at("pool_id").as_string() == us);
  CHECK(leases[0].at("owed_usd").as_string() == "7.200000");
  auto provider_leases = m.get(m.provider, "/v1/leases").json().at("leases").as_array();
  REQUIRE(provider_leases.size() == 1);
  CHECK(provider_leases[0].at("role").as_string() == "provider");
  // status=all is every state, as for orders; one state filters.
  CHECK(m.get(m.buyer, "/v1/leases?status=all").json().at("leases").as_array().size() == 1);
  CHECK(m.get(m.buyer, "/v1/leases?status=released").json().at("leases").as_array().empty());
  CHECK(m.get(m.buyer, "/v1/leases?status=gone").status == 400);

  auto provider_fills = m.get(m.provider, "/v1/fills").json().at("fills").as_array();
  REQUIRE(provider_fills.size() == 1);
  CHECK(provider_fills[0].at("liquidity").as_string() == "maker");
  CHECK(provider_fills[0].at("side").as_string() == "sell");

  // The published book: what is left of each ask, cheapest first.
  auto book = m.book();
  CHECK(book.at("asks") == json::parse(R"([["1.8000", 4], ["2.0000", 8]])"));
  CHECK(book.at("bids").as_array().empty());
  CHECK(book.at("sequence").as_int64() >= 3);
}

TEST_CASE("ioc takes what it can and cancels the rest, fok fills whole or not at all") {
  Market m;
  m.ask(m.pool("DE"), "2.0000", 8);

  auto fok = m.post(m.buyer, "/v1/orders", [] {
    auto b = spot_bid("3.0000", 10);
    b["time_in_force"] = "fok";
    return b;
  }());
  REQUIRE(fok.status == 201);
  CHECK(fok.json().at("order").at("status").as_string() == "cancelled");
  CHECK(fok.json().at("order").at("filled_quantity").as_int64() == 0);
  CHECK(fok.json().at("fills").as_array().empty());

  auto ioc = m.post(m.buyer, "/v1/orders", [] {
    auto b = spot_bid("3.0000", 10);
    b["time_in_force"] = "ioc";
    return b;
  }());
  REQUIRE(ioc.status == 201);
  auto order = ioc.json().at("order").as_object();
  CHECK(order.at("status").as_string() == "cancelled");
  CHECK(order.at("filled_quantity").as_int64() == 8);
  CHECK(order.at("remaining_quantity").as_int64() == 2);
  CHECK(m.book().at("asks").as_array().empty());
}

TEST_CASE("a constrained bid rests outside the levels and is counted apart") {
  Market m;
  m.ask(m.pool("DE"), "2.0000", 8);
  auto bid = spot_bid("5.0000", 2);
  bid["regions"] = json::array{"US"};
  auto r = m.post(m.buyer, "/v1/orders", bid);
  REQUIRE(r.status == 201);
  CHECK(r.json().at("order").at("status").as_string() == "open");
  CHECK(r.json().at("fills").as_array().empty());  // the only ask is in DE
  auto book = m.book();
  CHECK(book.at("bids").as_array().empty());
  CHECK(book.at("constrained_bids") == json::parse(R"({"orders": 1, "gpus": 2})"));
}

TEST_CASE("engine rejects are 422, stored, and answered the same way on a retry") {
  Market m;
  auto bid = spot_bid("2.0000", 3);
  bid["min_chunk"] = 2;
  bid["client_order_id"] = "odd-lot";
  auto first = m.post(m.buyer, "/v1/orders", bid);
  REQUIRE(first.status == 422);
  CHECK(code(first) == "quantity_not_multiple_of_chunk");
  auto order_id = std::string(first.json().at("error").at("order_id").as_string());
  auto again = m.post(m.buyer, "/v1/orders", bid);
  CHECK(again.status == 422);
  CHECK(code(again) == "quantity_not_multiple_of_chunk");
  CHECK(again.json().at("error").at("order_id").as_string() == order_id);
  auto stored = m.get(m.buyer, "/v1/orders/" + order_id);
  REQUIRE(stored.status == 200);
  CHECK(stored.json().at("status").as_string() == "rejected");

  // Halted market: rejected, then accepted again after resume.
  REQUIRE(m.post(m.admin, "/v1/markets/H100-SXM-80G/halt", json::object{}).status == 200);
  auto halted = m.post(m.buyer, "/v1/orders", spot_bid("2.0000", 2));
  CHECK(halted.status == 422);
  CHECK(code(halted) == "market_halted");
  REQUIRE(m.post(m.admin, "/v1/markets/H100-SXM-80G/resume", json::object{}).status == 200);
  CHECK(m.post(m.buyer, "/v1/orders", spot_bid("2.0000", 2)).status == 201);
}

TEST_CASE("a client_order_id is never recycled: a repeat returns the original, a new body conflicts") {
  Market m;
  auto bid = spot_bid("1.0000", 2);
  bid["client_order_id"] = "job-7";
  auto first = m.post(m.buyer, "/v1/orders", bid);
  REQUIRE(first.status == 201);
  auto id = first.json().at("order").at("id");

  auto repeat = m.post(m.buyer, "/v1/orders", bid);
  CHECK(repeat.status == 200);
  CHECK(repeat.json().at("order").at("id") == id);

  auto changed = bid;
  changed["price"] = "1.1000";
  auto conflict = m.post(m.buyer, "/v1/orders", changed);
  CHECK(conflict.status == 422);
  CHECK(code(conflict) == "idempotency_conflict");

  // Another account may use the same id.
  auto theirs = m.post(m.other, "/v1/orders", bid);
  CHECK(theirs.status == 201);
  CHECK(theirs.json().at("order").at("id") != id);

  // After the order ended and a restart, the store answers.
  REQUIRE(m.http->request("DELETE", "/v1/orders/" + std::string(id.as_string()), "", bearer(m.buyer.api_key)).status == 200);
  m.server->stop();
  m.server = std::make_unique<Gpuexd>(m.db.dsn(), std::vector<std::string>{}, false);
  m.http = std::make_unique<HttpClient>(m.server->port());
  auto after = m.post(m.buyer, "/v1/orders", bid);
  CHECK(after.status == 200);
  CHECK(after.json().at("order").at("id") == id);
  CHECK(after.json().at("order").at("status").as_string() == "cancelled");
  CHECK(m.post(m.buyer, "/v1/orders", changed).status == 422);
}

TEST_CASE("amend lowers quantity, cancel ends the order, and other accounts see 404") {
  Market m;
  auto placed = m.post(m.buyer, "/v1/orders", spot_bid("1.5000", 6));
  REQUIRE(placed.status == 201);
  std::string id(placed.json().at("order").at("id").as_string());
  CHECK(m.book().at("bids") == json::parse(R"([["1.5000", 6]])"));

  auto amended = m.http->request("PATCH", "/v1/orders/" + id, R"({"quantity": 4})", bearer(m.buyer.api_key));
  REQUIRE(amended.status == 200);
  CHECK(amended.json().at("order").at("quantity").as_int64() == 4);
  CHECK(m.book().at("bids") == json::parse(R"([["1.5000", 4]])"));
  // A quantity raised is refused with the rule it breaks, named at its field.
  auto raised = m.http->request("PATCH", "/v1/orders/" + id, R"({"quantity": 5})", bearer(m.buyer.api_key));
  CHECK(raised.status == 422);
  CHECK(raised.json().at("error").at("code") == "invalid_amend");
  CHECK(raised.json().at("error").at("field") == "quantity");
  CHECK(raised.json().at("error").at("message").as_string().starts_with("quantity may only go down"));

  CHECK(m.get(m.other, "/v1/orders/" + id).status == 404);
  CHECK(m.http->request("DELETE", "/v1/orders/" + id, "", bearer(m.other.api_key)).status == 404);

  auto cancelled = m.http->request("DELETE", "/v1/orders/" + id, "", bearer(m.buyer.api_key));
  REQUIRE(cancelled.status == 200);
  CHECK(cancelled.json().at("status").as_string() == "cancelled");
  CHECK(m.book().at("bids").as_array().empty());
  CHECK(m.http->request("DELETE", "/v1/orders/" + id, "", bearer(m.buyer.api_key)).status == 404);

  auto open = m.get(m.buyer, "/v1/orders?status=open").json().at("orders").as_array();
  CHECK(open.empty());
  auto all = m.get(m.buyer, "/v1/orders?status=all").json().at("orders").as_array();
  CHECK(all.size() == 1);
}

TEST_CASE("GET /v1/orders lists open and all orders newest first, page by page, by market too") {
  Market m;
  auto pool = m.pool("DE");
  m.ask(pool, "1.0000", 2);
  std::vector<std::string> ids;  // the buyer's orders in the order placed
  auto bid = [&](const char* market, const char* price, int gpus) {
    auto r = m.post(m.buyer, "/v1/orders",
                    {{"side", "buy"}, {"market", market}, {"price", price}, {"quantity", gpus}, {"duration", 3600}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    ids.emplace_back(r.json().at("order").at("id").as_string());
    return std::string(r.json().at("order").at("status").as_string());
  };
  CHECK(bid("H100-SXM-80G", "2.0000", 6) == "partially_filled");  // 0: takes the ask's 2 GPUs, 4 rest
  for (const char* price : {"1.1000", "1.2000", "1.3000", "1.4000", "1.5000", "1.6000"}) {
    CHECK(bid("H100-SXM-80G", price, 1) == "open");  // 1-6
  }
  CHECK(bid("H100-PCIE-80G", "1.1000", 1) == "open");  // 7
  CHECK(bid("H100-PCIE-80G", "1.2000", 1) == "open");  // 8
  for (int i : {2, 5, 7}) {
    REQUIRE(m.http->request("DELETE", "/v1/orders/" + ids[static_cast<std::size_t>(i)], "", bearer(m.buyer.api_key)).status == 200);
  }
  // What each listing must hold, newest (highest id) first, from what the test did above.
  auto expect = [&](std::initializer_list<int> placed) {
    std::vector<std::string> out;
    for (int i : placed) out.push_back(ids[static_cast<std::size_t>(i)]);
    return out;
  };
  // Every page of a listing, `limit` orders at a time, following next_cursor.
  auto list = [&](const std::string& query, int limit) {
    std::vector<std::string> got;
    std::string cursor;
    for (int page = 0; page < 20; ++page) {
      auto r = m.get(m.buyer, "/v1/orders?" + query + "&limit=" + std::to_string(limit) + cursor);
      INFO(query << " " << r.body);
      REQUIRE(r.status == 200);
      auto body = r.json().as_object();
      for (const auto& o : body.at("orders").as_array()) got.emplace_back(o.at("id").as_string());
      if (body.at("next_cursor").is_null()) return got;
      cursor = "&cursor=" + std::string(body.at("next_cursor").as_string());
    }
    FAIL("more pages than orders");
    return got;
  };
  for (int limit : {1, 2, 3, 100}) {
    INFO("limit " << limit);
    CHECK(list("status=open", limit) == expect({8, 6, 4, 3, 1, 0}));
    CHECK(list("status=all", limit) == expect({8, 7, 6, 5, 4, 3, 2, 1, 0}));
    CHECK(list("status=open&market=H100-SXM-80G", limit) == expect({6, 4, 3, 1, 0}));
    CHECK(list("status=all&market=H100-PCIE-80G", limit) == expect({8, 7}));
    CHECK(list("status=all&market=H100-SXM-80G", limit) == expect({6, 5, 4, 3, 2, 1, 0}));
  }
  CHECK(list("status=open", 2) == list("", 2));  // open is the default
}

TEST_CASE("a change to an order whose row is missing fails its batch instead of being skipped") {
  Market m;
  auto a = m.post(m.buyer, "/v1/orders", spot_bid("1.5000", 6));
  auto b = m.post(m.buyer, "/v1/orders", spot_bid("1.4000", 2));
  REQUIRE(a.status == 201);
  REQUIRE(b.status == 201);
  std::string a_id(a.json().at("order").at("id").as_string()), b_id(b.json().at("order").at("id").as_string());
  // The store loses a's row behind the server's back (an operator's mistake, a bad restore).
  auto db = gpuex::store::PgConnection::connect(m.db.dsn());
  db.exec("DELETE FROM orders WHERE id = $1::bigint", {a_id});

  auto refused = m.http->request("DELETE", "/v1/orders/" + a_id, "", bearer(m.buyer.api_key));
  CHECK(refused.status == 503);
  CHECK(code(refused) == "store_unavailable");
  CHECK_THAT(m.server->log(), Catch::Contains("the UPDATE of changed orders touched 0 rows, not 1"));
  // The batch committed nothing: no command logged for the cancel, so the engine rebuilt from the store
  // still has a open; writes resume for everything else.
  bool cancelled = false;
  for (int i = 0; i < 100 && !cancelled; ++i) {
    cancelled = m.http->request("DELETE", "/v1/orders/" + b_id, "", bearer(m.buyer.api_key)).status == 200;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(cancelled);
  CHECK(m.book().at("bids") == json::parse(R"([["1.5000", 6]])"));
  CHECK(m.server->process().running());
}

TEST_CASE("a post_only order that would take is rejected with would_take, as a 201 order") {
  Market m;
  m.ask(m.pool("DE"), "2.0000", 8);
  auto bid = spot_bid("2.0000", 2);
  bid["post_only"] = true;
  auto r = m.post(m.buyer, "/v1/orders", bid);
  REQUIRE(r.status == 201);
  CHECK(r.json().at("order").at("status").as_string() == "rejected");
  CHECK(r.json().at("order").at("reject_reason").as_string() == "would_take");
}

TEST_CASE("selling needs the provide scope and one's own pool") {
  Market m;
  auto pool = m.pool("DE");
  json::object sell{{"side", "sell"}, {"pool_id", pool}, {"price", "2.0000"}, {"quantity", 8},
                    {"start", at(unix_now())}, {"end", at(unix_now() + 86400)}};
  auto by_buyer = m.post(m.buyer, "/v1/orders", sell);
  CHECK(by_buyer.status == 403);
  auto by_other = m.post(m.other, "/v1/orders", sell);  // has provide, but not this pool
  CHECK(by_other.status == 404);
  sell["pool_id"] = "999999";
  CHECK(m.post(m.provider, "/v1/orders", sell).status == 404);
  auto unknown_market = spot_bid("1.0000", 1);
  unknown_market["market"] = "NO-SUCH-GPU";
  CHECK(m.post(m.buyer, "/v1/orders", unknown_market).status == 404);
}

namespace {

// A random load of asks, forward bids and spot bids (some trade) from `m`'s accounts.
void random_load(Market& m, std::uint32_t seed, int orders) {
  auto de = m.pool("DE");
  auto us = m.pool("US", 4);
  std::mt19937 rng(seed);
  for (int i = 0; i < orders; ++i) {
    int kind = static_cast<int>(rng() % 4);
    int price = 15000 + static_cast<int>(rng() % 10000);
    char p[16];
    std::snprintf(p, sizeof p, "%d.%04d", price / 10000, price % 10000);
    if (kind == 0) {
      auto r = m.post(m.provider, "/v1/orders",
                      {{"side", "sell"}, {"pool_id", rng() % 2 ? de : us}, {"price", p}, {"quantity", 1 + static_cast<int>(rng() % 4)},
                       {"start", at(unix_now())}, {"end", at(unix_now() + 86400 * (1 + static_cast<int>(rng() % 60)))}});
      CHECK((r.status == 201 || r.status == 422));
    } else if (kind == 1) {
      auto r = m.post(m.buyer, "/v1/orders",
                      {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", p}, {"quantity", 1 + static_cast<int>(rng() % 6)},
                       {"start", at(unix_now() + 86400 * (3 + static_cast<int>(rng() % 30)))},
                       {"end", at(unix_now() + 86400 * 40)}});
      CHECK(r.status == 201);
    } else {
      CHECK(m.post(m.buyer, "/v1/orders", spot_bid(p, 1 + static_cast<int>(rng() % 4))).status == 201);
    }
  }
}

// A batch of one command (a cancel of an order that does not exist, which the writer logs all the same)
// whose outcome is appended to `outcomes` as "<seq> committed" or "<seq> not committed".
gpuex::store::Batch cancel_batch(gpuex::matching::Seq seq, std::int64_t account, std::mutex& mutex,
                                 std::vector<std::string>& outcomes) {
  using namespace gpuex::matching;
  gpuex::store::LoggedCommand logged;
  logged.command = Command{seq, Seconds(unix_now()), AccountId(account), Cancel{OrderId(999)}};
  logged.done = [&mutex, &outcomes, seq](const EventSink* events) {
    std::lock_guard lock(mutex);
    outcomes.push_back(std::to_string(seq) + (events ? " committed" : " not committed"));
  };
  gpuex::store::Batch b;
  b.push_back(std::move(logged));
  return b;
}

}  // namespace

TEST_CASE("a pool shows its capacity now and its schedule ahead: forward leases, offered and free GPUs") {
  Market m;
  auto pool = m.pool("DE");  // 2 nodes x 8 GPUs
  const std::int64_t s = (unix_now() / 3600 + 2) * 3600;  // a whole hour, 1 to 2 hours ahead
  auto ask = m.post(m.provider, "/v1/orders",
                    {{"side", "sell"}, {"pool_id", pool}, {"price", "2.0000"}, {"quantity", 4},
                     {"start", at(s)}, {"end", at(s + 7200)}});
  REQUIRE(ask.status == 201);
  // A forward bid for the ask's second hour takes 2 of its 4 GPUs there.
  auto bid = m.post(m.buyer, "/v1/orders",
                    {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", "2.5000"}, {"quantity", 2},
                     {"start", at(s + 3600)}, {"end", at(s + 7200)}});
  INFO(bid.body);
  REQUIRE(bid.status == 201);
  REQUIRE(bid.json().at("fills").as_array().size() == 1);

  auto r = m.get(m.provider, "/v1/pools/" + pool);
  INFO(r.body);
  REQUIRE(r.status == 200);
  auto p = r.json().as_object();
  // Now nothing has started: all 16 GPUs are free.
  CHECK(p.at("leased_gpus").as_int64() == 0);
  CHECK(p.at("offered_gpus").as_int64() == 0);
  CHECK(p.at("free_gpus").as_int64() == 16);
  CHECK_FALSE(p.at("schedule_truncated").as_bool());
  const auto& schedule = p.at("schedule").as_array();
  REQUIRE(schedule.size() == 3);
  auto piece = [&](std::size_t i, std::int64_t leased, std::int64_t offered, std::int64_t free) {
    const auto& x = schedule[i].as_object();
    INFO("piece " << i);
    CHECK(x.at("leased_gpus").as_int64() == leased);
    CHECK(x.at("offered_gpus").as_int64() == offered);
    CHECK(x.at("free_gpus").as_int64() == free);
  };
  piece(0, 0, 0, 16);  // until the ask starts
  CHECK(schedule[0].at("to").as_string() == at(s));
  piece(1, 0, 4, 12);  // the ask's first hour, unsold
  CHECK(schedule[1].at("from").as_string() == at(s));
  CHECK(schedule[1].at("to").as_string() == at(s + 3600));
  piece(2, 2, 2, 12);  // its second hour: 2 GPUs reserved by the lease, 2 still offered
  CHECK(schedule[2].at("from").as_string() == at(s + 3600));
  CHECK(schedule[2].at("to").as_string() == at(s + 7200));

  // The list shows each pool's capacity now, without the schedule.
  auto list = m.get(m.provider, "/v1/pools").json().at("pools").as_array();
  REQUIRE(list.size() == 1);
  CHECK(list[0].at("free_gpus").as_int64() == 16);
  CHECK_FALSE(list[0].as_object().contains("schedule"));
}

TEST_CASE("the engine's state after a clean stop equals the state rebuilt on restart") {
  Market m;
  random_load(m, 20261129, 60);
  REQUIRE(m.server->stop() == 0);
  const auto stopped = stopped_at(m.server->log());

  Gpuexd again(m.db.dsn(), {}, false);
  CHECK(recovered_at(again.log()) == stopped);
  CHECK_THAT(again.log(), Catch::Contains("no snapshot, "));
}

TEST_CASE("a restart restores the latest snapshot and replays only the commands after it, and skips a damaged one") {
  Market m({"--snapshot-every", "25"});
  random_load(m, 20261130, 80);
  // Snapshots are written once their commands committed, by their own thread: wait for two.
  const std::regex written("snapshot of seq \\d+ written");
  for (int i = 0; i < 100; ++i) {
    std::string log = m.server->log();
    if (std::distance(std::sregex_iterator(log.begin(), log.end(), written), std::sregex_iterator()) >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(m.server->stop() == 0);
  const auto stopped = stopped_at(m.server->log());
  auto db = gpuex::store::PgConnection::connect(m.db.dsn());
  auto rows = db.exec("SELECT seq FROM engine_snapshots ORDER BY seq DESC");
  REQUIRE(rows.rows() == 2);  // the latest two are kept
  const long long newest = rows.integer(0, 0), older = rows.integer(1, 0);
  CHECK(newest - older >= 25);
  CHECK(newest < std::stoll(stopped.first));  // so the restart below has commands to replay

  std::smatch from;
  std::string stopped_again;
  {
    Gpuexd again(m.db.dsn(), {}, false);
    const std::string log = again.log();
    CHECK(recovered_at(log) == stopped);
    REQUIRE(std::regex_search(log, from, std::regex("snapshot of seq (\\d+), (\\d+) commands replayed")));
    CHECK(std::stoll(from[1].str()) == newest);
    CHECK(std::stoll(from[2].str()) == std::stoll(stopped.first) - newest);
    REQUIRE(again.stop() == 0);
    stopped_again = stopped_at(again.log()).second;
  }

  // A snapshot that does not have its digest (damaged, or edited by hand) is not used: the one before is.
  db.exec("UPDATE engine_snapshots SET digest = '0000000000000000' WHERE seq = $1", {std::to_string(newest)});
  Gpuexd third(m.db.dsn(), {}, false);
  const std::string log = third.log();
  CHECK_THAT(log, Catch::Contains("not using the snapshot at seq " + std::to_string(newest) +
                                  ": its state does not have its digest"));
  REQUIRE(std::regex_search(log, from, std::regex("snapshot of seq (\\d+), (\\d+) commands replayed")));
  CHECK(std::stoll(from[1].str()) == older);
  CHECK(recovered_at(log).second == stopped_again);
}

TEST_CASE("a snapshot the store refused is written on a later try, and a restart restores it") {
  Market m({"--snapshot-every", "25", "--snapshot-retry-ms", "200"});
  // The store refuses the first snapshot once (a sequence, so the refusal is not rolled back with it).
  auto db = gpuex::store::PgConnection::connect(m.db.dsn());
  db.exec_script(R"sql(
    CREATE SEQUENCE snapshot_inserts;
    CREATE FUNCTION refuse_first_snapshot() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF nextval('snapshot_inserts') = 1 THEN RAISE EXCEPTION 'refused for the test'; END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER refuse_first_snapshot BEFORE INSERT ON engine_snapshots
      FOR EACH ROW EXECUTE FUNCTION refuse_first_snapshot();)sql");
  random_load(m, 20261201, 30);
  std::smatch refused;
  std::string log;
  for (int i = 0; i < 100; ++i) {
    log = m.server->log();
    if (log.find(" written in ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(std::regex_search(log, refused, std::regex("snapshot of seq (\\d+) not written \\([\\s\\S]*refused for the test[\\s\\S]*\\); "
                                                     "trying again in 200 ms")));
  CHECK_THAT(log, Catch::Contains("snapshot of seq " + refused[1].str() + " written in "));
  REQUIRE(m.server->stop() == 0);
  const auto stopped = stopped_at(m.server->log());
  Gpuexd again(m.db.dsn(), {}, false);
  CHECK(recovered_at(again.log()) == stopped);
  CHECK_THAT(again.log(), !Catch::Contains("no snapshot, "));  // the retried one, or a later one
}

TEST_CASE("an Idempotency-Key makes a POST happen once, across a restart too") {
  Market m;
  const std::string body = R"({"market": "H100-SXM-80G", "region": "FR", "tier": "instance", "gpus_per_node": 4,
                               "nodes": 3, "pue": "1.4", "renewable_pct": 30, "carbon_g_per_kwh": 350})";
  auto with_key = [&](const std::string& key) {
    auto h = bearer(m.provider.api_key);
    h.emplace_back("Idempotency-Key", key);
    return h;
  };
  auto first = m.http->request("POST", "/v1/pools", body, with_key("pool-fr-1"));
  REQUIRE(first.status == 201);
  auto again = m.http->request("POST", "/v1/pools", body, with_key("pool-fr-1"));
  CHECK(again.status == 200);  // API.md: a repeat returns the original (200)
  CHECK(again.body == first.body);
  CHECK(again.headers["idempotent-replayed"] == "true");
  // The same request serialized again (other spacing, other key order) is the same request (API.md: "with the
  // same rules" as a client_order_id repeat, which is judged on the order as read).
  const std::string reserialized = R"({"tier":"instance","region":"FR","market":"H100-SXM-80G","nodes":3,
      "gpus_per_node":4,"carbon_g_per_kwh":350,"renewable_pct":30,"pue":"1.4"})";
  auto respelled = m.http->request("POST", "/v1/pools", reserialized, with_key("pool-fr-1"));
  CHECK(respelled.status == 200);
  CHECK(respelled.body == first.body);

  auto other = m.http->request("POST", "/v1/pools", R"({"market": "H100-SXM-80G", "region": "FR", "tier": "instance",
      "gpus_per_node": 4, "nodes": 4, "pue": "1.4", "renewable_pct": 30, "carbon_g_per_kwh": 350})", with_key("pool-fr-1"));
  CHECK(other.status == 422);
  CHECK(code(other) == "idempotency_conflict");
  CHECK(m.http->request("POST", "/v1/pools", body, with_key("no spaces allowed")).status == 400);

  m.server->stop();
  m.server = std::make_unique<Gpuexd>(m.db.dsn(), std::vector<std::string>{}, false);
  m.http = std::make_unique<HttpClient>(m.server->port());
  auto after = m.http->request("POST", "/v1/pools", body, with_key("pool-fr-1"));
  CHECK(after.status == 200);
  CHECK(after.body == first.body);
  CHECK(after.headers["idempotent-replayed"] == "true");
  // After the restart the key is read back from PostgreSQL: the same there.
  CHECK(m.http->request("POST", "/v1/pools", reserialized, with_key("pool-fr-1")).body == first.body);
  // A key kept by a server from before the canonical form (its hash of the body's bytes as sent) still
  // knows the request it came with.
  {
    auto db = gpuex::store::PgConnection::connect(m.db.dsn());
    db.exec("INSERT INTO idempotency_keys (account_id, key, request_sha256, status, body) "
            "VALUES ($1, 'kept-before', sha256(convert_to($2, 'UTF8')), 201, $3)",
            {m.provider.account_id, "POST /v1/pools\n" + body, first.body});
  }
  auto kept = m.http->request("POST", "/v1/pools", body, with_key("kept-before"));
  CHECK(kept.status == 200);
  CHECK(kept.body == first.body);
  // One pool, whatever the repeats.
  CHECK(m.get(m.provider, "/v1/pools").json().at("pools").as_array().size() == 1);
  // Without a key, the same body is a new pool.
  CHECK(m.http->request("POST", "/v1/pools", body, bearer(m.provider.api_key)).status == 201);
  CHECK(m.get(m.provider, "/v1/pools").json().at("pools").as_array().size() == 2);
}

TEST_CASE("binary array parameters round-trip every element type the writer sends") {
  using gpuex::store::BinaryArray;
  using T = BinaryArray::Type;
  TestDatabase tdb;
  auto db = gpuex::store::PgConnection::connect(tdb.dsn());
  db.exec_script(
      "CREATE TABLE t (n int, i8 bigint, i4 integer, b boolean, tx text, js json, jb jsonb, by bytea)");
  BinaryArray n(T::int4), i8(T::int8), i4(T::int4), b(T::boolean), tx(T::text), js(T::json), jb(T::jsonb), by(T::bytea);
  // Row 1: extremes and characters an array literal would have to quote or escape.
  n.add(1), i8.add(std::numeric_limits<std::int64_t>::min()), i4.add(std::numeric_limits<std::int32_t>::max());
  b.add(true), tx.add(std::string_view("a \"quoted\", {braced} back\\slash NULL \xc3\xa9")), js.add(std::string_view("{\"k\": [1, \"x\\\"y\"]}"));
  jb.add(std::string_view("{\"b\": 2, \"a\": 1}")), by.add(std::string_view("\x00\x01\xff", 3));
  // Row 2: NULLs wherever a column allows them, and the other extremes.
  n.add(2), i8.add(std::numeric_limits<std::int64_t>::max()), i4.add(std::numeric_limits<std::int32_t>::min());
  b.add(false), tx.add_null(), js.add_null(), jb.add_null(), by.add_null();
  // Row 3: empty strings and small negatives.
  n.add(3), i8.add(-1), i4.add(-2), b.add(false), tx.add(std::string_view("")), js.add(std::string_view("[]"));
  jb.add(std::string_view("null")), by.add(std::string_view(""));
  {
    gpuex::store::Pipeline pipe(db);
    pipe.send("BEGIN");
    pipe.send("INSERT INTO t SELECT * FROM unnest($1::integer[], $2::bigint[], $3::integer[], $4::boolean[], $5::text[], "
              "$6::json[], $7::jsonb[], $8::bytea[])",
              {&n, &i8, &i4, &b, &tx, &js, &jb, &by});
    // An empty array is zero rows, not an error.
    BinaryArray empty(T::int8);
    pipe.send("INSERT INTO t (n) SELECT * FROM unnest($1::bigint[])", {&empty});
    pipe.send("COMMIT");
    pipe.sync();
  }
  auto r = db.exec(
      "SELECT n, i8::text, i4::text, b::text, coalesce(tx, '<null>'), coalesce(js::text, '<null>'), "
      "coalesce(jb::text, '<null>'), coalesce(encode(by, 'hex'), '<null>') FROM t ORDER BY n");
  REQUIRE(r.rows() == 3);
  const std::vector<std::vector<std::string>> expected = {
      {"1", "-9223372036854775808", "2147483647", "true", "a \"quoted\", {braced} back\\slash NULL \xc3\xa9",
       "{\"k\": [1, \"x\\\"y\"]}", "{\"a\": 1, \"b\": 2}", "0001ff"},
      {"2", "9223372036854775807", "-2147483648", "false", "<null>", "<null>", "<null>", "<null>"},
      {"3", "-1", "-2", "false", "", "[]", "null", ""},
  };
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 8; ++col) CHECK(std::string(r.text(row, col)) == expected[static_cast<std::size_t>(row)][static_cast<std::size_t>(col)]);
  }
  // A value that does not fit the element type is refused before anything is sent.
  BinaryArray small(T::int4);
  CHECK_THROWS_AS(small.add(std::int64_t{1} << 31), gpuex::store::StoreError);
  CHECK_THROWS_AS(small.add(std::string_view("text")), gpuex::store::StoreError);
  // Invalid JSON is refused by the server, as it was in the text format.
  BinaryArray bad(T::json);
  bad.add(std::string_view("{not json"));
  gpuex::store::Pipeline pipe(db);
  pipe.send("INSERT INTO t (js) SELECT * FROM unnest($1::json[])", {&bad});
  CHECK_THROWS_AS(pipe.sync(), gpuex::store::StoreError);
}

TEST_CASE("a transaction that fails at its COMMIT fails the one queued behind it, and neither is acked") {
  using namespace gpuex::matching;
  using gpuex::store::Batch;
  TestDatabase tdb;
  auto migrated = run_gpuexd({"migrate", "--dsn", tdb.dsn()});
  INFO(migrated.output);
  REQUIRE(migrated.exit_code == 0);
  auto db = gpuex::store::PgConnection::connect(tdb.dsn());
  // The commands of account 666 are refused at COMMIT (a deferred constraint trigger): every statement
  // of their transaction runs, only its COMMIT fails. A transaction sent on the same connection behind
  // it (libpq pipeline mode: a failed sync point does not stop the next) would then start afresh and
  // commit unless the writer stops it — by not sending it, as now, or by a check inside it that the
  // one before committed (40aa8a5, reverted: that writer sent it early and this test saw it commit
  // without the check).
  db.exec_script(R"sql(
    CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      RAISE EXCEPTION 'refused at commit for the test';
    END $$;
    CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON engine_commands DEFERRABLE INITIALLY DEFERRED
      FOR EACH ROW WHEN (NEW.account_id = 666) EXECUTE FUNCTION refuse_at_commit();)sql");
  std::mutex mutex;
  std::vector<std::string> outcomes, failures;
  int listened = 0;
  // One batch per transaction, all three queued before the writer starts.
  gpuex::store::Writer writer(
      tdb.dsn(),
      [&](const std::string& why) {
        std::lock_guard lock(mutex);
        failures.push_back(why);
      },
      1);
  writer.add_listener([&](const Batch&) { ++listened; });
  auto batch = [&](gpuex::matching::Seq seq, std::int64_t account) { return cancel_batch(seq, account, mutex, outcomes); };
  writer.submit(batch(1, 1));
  writer.submit(batch(2, 666));  // N: fails at its COMMIT
  writer.submit(batch(3, 1));    // N+1: queued behind N's COMMIT
  writer.start();
  writer.wait_idle();
  CHECK(outcomes == std::vector<std::string>{"1 committed", "2 not committed", "3 not committed"});
  CHECK(listened == 1);
  REQUIRE(failures.size() == 1);
  CHECK_THAT(failures[0], Catch::Contains("refused at commit for the test"));
  CHECK(writer.counters().transactions == 1);
  auto logged = db.exec("SELECT seq FROM engine_commands ORDER BY seq");
  REQUIRE(logged.rows() == 1);
  CHECK(logged.integer(0, 0) == 1);
  // Writes stay stopped until the engine is rebuilt (reset), then go on from what committed.
  writer.submit(batch(4, 1));
  writer.wait_idle();
  CHECK(outcomes.back() == "4 not committed");
  writer.reset();
  writer.submit(batch(2, 1));
  writer.wait_idle();
  CHECK(outcomes.back() == "2 committed");
  CHECK(db.exec("SELECT count(*) FROM engine_commands").integer(0, 0) == 2);
  writer.stop();
}

TEST_CASE("store writer: a transaction that failed without an answer is published once fence() finds it committed, and only then") {
  using namespace gpuex::matching;
  using gpuex::store::Batch;
  TestDatabase tdb;
  REQUIRE(run_gpuexd({"migrate", "--dsn", tdb.dsn()}).exit_code == 0);
  auto db = gpuex::store::PgConnection::connect(tdb.dsn());
  std::mutex mutex;
  std::vector<std::string> outcomes;
  std::vector<Seq> published;
  gpuex::store::Writer writer(tdb.dsn(), [](const std::string&) {}, 1);
  writer.set_answer_timeout(std::chrono::milliseconds(300));
  writer.add_listener([&](const Batch& b) {
    std::lock_guard lock(mutex);
    published.push_back(b.front().command.seq);
  });
  auto batch = [&](Seq seq) { return cancel_batch(seq, 1, mutex, outcomes); };
  auto logged = [&](Seq seq) {
    return db.exec("SELECT count(*) FROM engine_commands WHERE seq = $1::bigint", {std::to_string(seq)}).integer(0, 0) == 1;
  };
  writer.start();
  writer.submit(batch(1));
  writer.wait_idle();
  REQUIRE(published == std::vector<Seq>{1});

  // Another session holds a lock the writer's INSERT waits for: no answer within the timeout, so the
  // command is answered as failed while its transaction lives on in PostgreSQL.
  auto locker = gpuex::store::PgConnection::connect(tdb.dsn());
  locker.exec("BEGIN");
  locker.exec("LOCK TABLE engine_commands IN SHARE MODE");
  writer.submit(batch(2));
  writer.wait_idle();
  CHECK(outcomes.back() == "2 not committed");
  CHECK(published == std::vector<Seq>{1});

  SECTION("the lock goes, the transaction commits after all, and fence() publishes it") {
    locker.exec("COMMIT");
    bool committed = false;
    for (int i = 0; i < 100 && !committed; ++i) {
      committed = logged(2);
      if (!committed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(committed);  // PostgreSQL ran the statements the writer had sent, COMMIT included
    CHECK(published == std::vector<Seq>{1});  // nothing before the fence
    writer.fence(db);
    CHECK(published == std::vector<Seq>{1, 2});
    writer.fence(db);  // once
    CHECK(published == std::vector<Seq>{1, 2});
  }
  SECTION("fence() ends the waiting transaction before it commits, and publishes nothing") {
    writer.fence(db);
    // The writer's backend is gone before the lock goes: nothing is left that could commit it later.
    CHECK(db.exec("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'gpuexd writer' "
                  "AND datname = current_database()").integer(0, 0) == 0);
    locker.exec("COMMIT");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    CHECK_FALSE(logged(2));
    CHECK(published == std::vector<Seq>{1});
  }
  // Either way the writer goes on from what the store holds.
  writer.reset();
  writer.submit(batch(3));
  writer.wait_idle();
  CHECK(outcomes.back() == "3 committed");
  CHECK(published.back() == 3);
  writer.stop();
}
