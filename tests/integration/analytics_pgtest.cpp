// Price discovery over real HTTP against a real PostgreSQL: hand-made trades whose candles, VWAP,
// index, forward curve, stats and green discount are computed here from the fills themselves
// (independently of the server's rollups), and rollups that equal a recomputation from raw trades.
#include <signal.h>

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <random>

#include "matching/types.hpp"
#include "server/decimal.hpp"
#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;
using I128 = gpuex::matching::Int128;

namespace {

constexpr const char* kMarket = "A100-SXM-80G";  // perf_factor 312 / 989 = 0.315470

std::int64_t parse_time(const json::value& v) { return *gpuex::parse_rfc3339(v.as_string()); }
std::int64_t micros(const json::value& v) {
  auto p = gpuex::parse_fixed(v.as_string(), 6);
  REQUIRE(p);
  return *p;
}
std::int64_t floor_to(std::int64_t t, std::int64_t step) { return t - ((t % step) + step) % step; }

// Rounds num / den half to even (den > 0), written here rather than taken from the server.
I128 half_even(I128 num, I128 den) {
  I128 q = num / den, r = num % den;
  if (r < 0) q -= 1, r += den;
  if (2 * r > den || (2 * r == den && q % 2 != 0)) q += 1;
  return q;
}

struct Fill {
  std::int64_t id, time, price, list, quantity, start, end;
  bool green;
  std::string bucket;
  std::int64_t gpu_seconds() const { return quantity * (end - start); }
};

// A market with a provider, a buyer and an admin on a fresh database and a test-clock server.
struct Exchange {
  TestDatabase db;
  CreatedAccount admin, provider, buyer;
  std::unique_ptr<Gpuexd> server;
  std::unique_ptr<HttpClient> http;
  std::int64_t advanced = 0;
  std::int64_t perf_e6 = 0;

  Exchange() {
    REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
    admin = create_account(db.dsn(), "ops", "admin");
    provider = create_account(db.dsn(), "provider", "provide,read,trade");
    buyer = create_account(db.dsn(), "buyer", "trade,read");
    start();
    auto markets = http->get("/v1/markets").json();
    for (const auto& m : markets.at("markets").as_array()) {
      if (m.at("id").as_string() == kMarket) perf_e6 = micros(m.at("perf_factor"));
    }
    REQUIRE(perf_e6 == 315470);
  }
  void start() {
    server = std::make_unique<Gpuexd>(db.dsn(), std::vector<std::string>{"--test-clock", "--tick-ms", "100"}, false);
    http = std::make_unique<HttpClient>(server->port());
    // The test clock starts again at the wall clock; time must not go backwards for the books.
    if (advanced > 0) REQUIRE(post(admin, "/v1/admin/clock", {{"advance_s", advanced}}).status == 200);
  }
  void restart() {
    http.reset();
    REQUIRE(server->stop() == 0);
    server.reset();
    start();
  }
  void crash() {  // kill -9, then start again
    http.reset();
    server->process().signal(SIGKILL);
    REQUIRE(server->process().wait(std::chrono::seconds(10)));
    server.reset();
    start();
  }
  std::int64_t now() const { return unix_now() + advanced; }
  void advance(std::int64_t s) {
    REQUIRE(post(admin, "/v1/admin/clock", {{"advance_s", s}}).status == 200);
    advanced += s;
  }

  HttpReply post(const CreatedAccount& who, const std::string& path, const json::value& body) {
    return http->request("POST", path, json::serialize(body), bearer(who.api_key));
  }
  json::value get(const std::string& path, unsigned status = 200) {
    auto r = http->get(path);
    INFO(path << " -> " << r.body);
    REQUIRE(r.status == status);
    return r.json();
  }

  std::string pool(bool green, const char* market = kMarket, const char* tier = "bare_metal") {
    auto r = post(provider, "/v1/pools",
                  {{"market", market}, {"region", green ? "IS" : "US"}, {"tier", tier}, {"gpus_per_node", 8},
                   {"nodes", 50}, {"pue", green ? "1.1" : "1.5"}, {"renewable_pct", green ? 90 : 10},
                   {"carbon_g_per_kwh", green ? 50 : 500}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    std::string id(r.json().at("id").as_string());
    if (green) {
      auto v = post(admin, "/v1/pools/" + id + "/verify",
                    {{"verified", true}, {"expires_at", at(now() + 365 * 86400)}, {"evidence", "audit"}});
      INFO(v.body);
      REQUIRE(v.status == 200);
      REQUIRE(v.json().at("green_tier").as_string() == "green_plus");
    }
    return id;
  }

  std::string ask(const std::string& pool_id, const char* price, int gpus, std::int64_t start, std::int64_t end) {
    auto r = post(provider, "/v1/orders",
                  {{"side", "sell"}, {"pool_id", pool_id}, {"price", price}, {"quantity", gpus}, {"start", at(start)},
                   {"end", at(end)}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    return std::string(r.json().at("order").at("id").as_string());
  }
  void cancel(const CreatedAccount& who, const std::string& order) {
    REQUIRE(http->request("DELETE", "/v1/orders/" + order, "", bearer(who.api_key)).status == 200);
  }

  // One trade: an ask of `gpus` at `list`, taken whole by an ioc bid, then the ask's rest cancelled.
  Fill trade(const std::string& pool_id, bool green, const char* list, int gpus, json::object window) {
    auto a = ask(pool_id, list, gpus, now() - 60, now() + 200 * 86400);
    json::object bid{{"side", "buy"}, {"market", kMarket}, {"price", "100.0000"}, {"quantity", gpus},
                     {"time_in_force", "ioc"}};
    for (auto& [k, v] : window) bid[k] = v;
    auto r = post(buyer, "/v1/orders", bid);
    INFO(r.body);
    REQUIRE(r.status == 201);
    auto body = r.json();
    const auto& fills = body.at("fills").as_array();
    REQUIRE(fills.size() == 1);
    const auto& f = fills[0];
    cancel(provider, a);
    Fill out{std::stoll(std::string(f.at("trade_id").as_string())), parse_time(f.at("time")), micros(f.at("price")),
             micros(f.at("list_price")), f.at("quantity").as_int64(), parse_time(f.at("start")),
             parse_time(f.at("end")), green, ""};
    REQUIRE(out.list == *gpuex::parse_fixed(list, 6));
    if (!green) REQUIRE(out.price == out.list);  // a plain pool gives no discount: the trade is at the ask
    out.bucket = out.start - out.time <= 900 ? "spot" : at(out.start).substr(0, 7);
    return out;
  }
  Fill spot(const std::string& pool_id, bool green, const char* list, int gpus, int duration_s) {
    return trade(pool_id, green, list, gpus, {{"duration", duration_s}});
  }
};

std::string normalized_of(std::int64_t price_micros) {
  return gpuex::format_price(static_cast<std::int64_t>(half_even(I128(price_micros) * 1000000, 315470)));
}
// The same of a price that is a quotient (a VWAP, an index): rounded once, not the rounded price ÷ 0.315470.
std::string normalized_of(I128 num, I128 den) {
  return gpuex::format_price(static_cast<std::int64_t>(half_even(num * 1000000, den * 315470)));
}

// GPU-hours with the API's 6 decimals.
std::int64_t hours_e6(I128 gpu_seconds) { return static_cast<std::int64_t>(half_even(gpu_seconds * 1000000, 3600)); }

// The daily index of one day's spot trades, per trade (not per price): micro-dollars as an exact
// quotient (weighted, kept).
std::pair<I128, I128> trimmed_index_exact(std::vector<std::pair<std::int64_t, I128>> trades /* price, gpu-seconds */) {
  std::sort(trades.begin(), trades.end());
  I128 total = 0;
  for (auto& t : trades) total += t.second;
  // Work in units of 1/20 GPU-second so both cuts are whole numbers.
  I128 lo = total, hi = 19 * total, below = 0, weighted = 0, kept = 0;
  for (auto& [price, gs] : trades) {
    I128 a = below * 20, b = (below + gs) * 20;
    I128 in = std::max<I128>(0, std::min(b, hi) - std::max(a, lo));
    weighted += in * price;
    kept += in;
    below += gs;
  }
  REQUIRE(kept == 18 * total);
  return {weighted, kept};
}
std::int64_t trimmed_index(const std::vector<std::pair<std::int64_t, I128>>& trades) {
  auto [weighted, kept] = trimmed_index_exact(trades);
  return static_cast<std::int64_t>(half_even(weighted, kept));
}

}  // namespace

TEST_CASE("candles, stats, index and trade prints equal what the hand-made trades say") {
  Exchange x;
  auto green = x.pool(true);
  auto plain = x.pool(false);
  x.advance(61 - x.now() % 60);  // a second into a minute: the first three trades share it (checked by hand below)
  std::vector<Fill> fills;
  fills.push_back(x.spot(plain, false, "2.0000", 4, 3600));
  fills.push_back(x.spot(green, true, "3.0000", 2, 7200));  // green_plus: 20 % off -> 2.4000
  fills.push_back(x.spot(plain, false, "1.5000", 8, 1800));
  x.advance(61);
  fills.push_back(x.spot(plain, false, "2.2000", 1, 10800));
  x.advance(3600);
  fills.push_back(x.spot(green, true, "2.0000", 10, 3600));  // -> 1.6000
  fills.push_back(x.spot(plain, false, "3.0000", 2, 3600));
  x.advance(400);
  fills.push_back(x.spot(plain, false, "4.0000", 1, 3600));
  CHECK(fills[1].price == 2400000);
  CHECK(fills[4].price == 1600000);
  for (const auto& f : fills) CHECK(f.bucket == "spot");

  SECTION("every candle field of every interval") {
    for (auto [name, step] : {std::pair{"1m", 60}, {"5m", 300}, {"1h", 3600}, {"1d", 86400}}) {
      // Expected candles, straight from the fills (already in trade order).
      std::map<std::int64_t, std::vector<Fill>> periods;
      for (const auto& f : fills) periods[floor_to(f.time, step)].push_back(f);
      auto from = fills.front().time - 1, to = fills.back().time + 1;
      auto body = x.get(std::string("/v1/markets/") + kMarket + "/candles?bucket=spot&interval=" + name +
                        "&from=" + at(from) + "&to=" + at(to));
      const auto& candles = body.at("candles").as_array();
      INFO(name << ": " << json::serialize(body));
      REQUIRE(candles.size() == periods.size());
      std::size_t i = 0;
      for (const auto& [start, ts] : periods) {
        const auto& c = candles[i++];
        CHECK(parse_time(c.at("start")) == start);
        std::int64_t high = 0, low = std::numeric_limits<std::int64_t>::max();
        I128 gs = 0, notional = 0;
        for (const auto& f : ts) {
          high = std::max(high, f.price), low = std::min(low, f.price);
          gs += f.gpu_seconds(), notional += I128(f.gpu_seconds()) * f.price;
        }
        CHECK(micros(c.at("open")) == ts.front().price);
        CHECK(micros(c.at("close")) == ts.back().price);
        CHECK(micros(c.at("high")) == high);
        CHECK(micros(c.at("low")) == low);
        auto vwap = static_cast<std::int64_t>(half_even(notional, gs));
        CHECK(micros(c.at("vwap")) == vwap);
        CHECK(micros(c.at("volume_gpu_hours")) == hours_e6(gs));
        CHECK(c.at("trades").as_int64() == static_cast<std::int64_t>(ts.size()));
        CHECK(c.at("close_normalized").as_string() == normalized_of(ts.back().price));
        CHECK(c.at("vwap_normalized").as_string() == normalized_of(notional, gs));
      }
    }
    // Hand check of the first minute: 4×1h at 2.00, 2×2h at 2.40, 8×0.5h at 1.50 = 12 GPU-h, USD 23.60.
    REQUIRE(floor_to(fills[0].time, 60) == floor_to(fills[2].time, 60));
    {
      auto body = x.get(std::string("/v1/markets/") + kMarket + "/candles?interval=1m&from=" + at(fills[0].time) +
                        "&to=" + at(fills[2].time + 1));
      auto c = body.at("candles").at(0);
      CHECK(c.at("vwap").as_string() == "1.966667");  // 23.60 / 12 = 1.9666…
      CHECK(c.at("volume_gpu_hours").as_string() == "12.0");
    }
  }

  SECTION("24 h stats with the green share and the green discount given") {
    auto s = x.get(std::string("/v1/markets/") + kMarket + "/stats");
    I128 gs = 0, notional = 0, green_gs = 0, discount = 0;
    std::int64_t high = 0, low = std::numeric_limits<std::int64_t>::max();
    for (const auto& f : fills) {
      gs += f.gpu_seconds(), notional += I128(f.gpu_seconds()) * f.price;
      high = std::max(high, f.price), low = std::min(low, f.price);
      if (f.green) green_gs += f.gpu_seconds();
      discount += I128(std::max<std::int64_t>(0, f.list - f.price)) * f.gpu_seconds();
    }
    INFO(json::serialize(s));
    CHECK(s.at("trades").as_int64() == 7);
    CHECK(micros(s.at("volume_gpu_hours")) == hours_e6(gs));
    CHECK(micros(s.at("vwap")) == half_even(notional, gs));
    CHECK(micros(s.at("high")) == high);
    CHECK(micros(s.at("low")) == low);
    CHECK(micros(s.at("green_volume_gpu_hours")) == hours_e6(green_gs));
    CHECK(micros(s.at("green_share")) == half_even(green_gs * 1000000, gs));
    // By hand: 2 GPUs × 2 h × (3.00 − 2.40) + 10 × 1 h × (2.00 − 1.60) = 2.40 + 4.00.
    CHECK(s.at("green_discount_usd").as_string() == "6.400000");
    CHECK(micros(s.at("green_discount_usd")) == half_even(discount, 3600));
    CHECK(s.at("high_normalized").as_string() == normalized_of(high));
    CHECK(s.at("vwap_normalized").as_string() == normalized_of(notional, gs));
  }

  SECTION("the daily index trims 5 % of the day's volume from each end") {
    std::map<std::int64_t, std::vector<std::pair<std::int64_t, I128>>> days;
    for (const auto& f : fills) days[floor_to(f.time, 86400)].emplace_back(f.price, f.gpu_seconds());
    auto body = x.get(std::string("/v1/index/") + kMarket + "?from=" + at(fills.front().time - 86400) + "&to=" +
                      at(fills.back().time + 1));
    INFO(json::serialize(body));
    const auto& index = body.at("index").as_array();
    REQUIRE(index.size() == days.size());
    std::size_t i = 0;
    for (const auto& [day, trades] : days) {
      const auto& d = index[i++];
      CHECK(d.at("day").as_string() == at(day).substr(0, 10));
      CHECK(micros(d.at("value")) == trimmed_index(trades));
      CHECK(d.at("trades").as_int64() == static_cast<std::int64_t>(trades.size()));
      auto [weighted, kept] = trimmed_index_exact(trades);
      CHECK(d.at("value_normalized").as_string() == normalized_of(weighted, kept));
    }
    if (days.size() == 1) {
      // By hand: volume 4 + 4 + 4 + 3 + 10 + 2 + 1 = 28 GPU-h; 1.4 GPU-h cut from each end. Sorted:
      // 1.50×4, 1.60×10, 2.00×4, 2.20×3, 2.40×4, 3.00×2, 4.00×1: the low cut takes 1.4 of the 1.50
      // trade, the high cut the 4.00 trade and 0.4 of the 3.00 one (a trade on the cut counts in part).
      // (2.6×1.5 + 10×1.6 + 4×2 + 3×2.2 + 4×2.4 + 1.6×3) / 25.2 = 48.9 / 25.2 = 1.940476…
      CHECK(index[0].at("value").as_string() == "1.940476");
    }
  }

  SECTION("trade prints page newest first, and come as CSV") {
    std::vector<std::string> seen;
    std::string path = std::string("/v1/markets/") + kMarket + "/trades?limit=3";
    for (int page = 0; page < 5; ++page) {
      auto body = x.get(path);
      for (const auto& t : body.at("trades").as_array()) {
        seen.emplace_back(t.at("trade_id").as_string());
        if (seen.size() == 1) {
          CHECK(t.at("price").as_string() == "4.0000");
          CHECK(t.at("price_normalized").as_string() == normalized_of(4000000));
          CHECK(t.at("gpu_hours").as_string() == "1.0");
          CHECK(t.at("green_tier").as_string() == "none");
        }
      }
      if (body.at("next_cursor").is_null()) break;
      path = std::string("/v1/markets/") + kMarket + "/trades?limit=3&cursor=" + std::string(body.at("next_cursor").as_string());
    }
    REQUIRE(seen.size() == fills.size());
    for (std::size_t i = 0; i < fills.size(); ++i) CHECK(seen[i] == std::to_string(fills[fills.size() - 1 - i].id));

    auto from_second = x.get(std::string("/v1/markets/") + kMarket + "/trades?from=" + at(fills[4].time));
    CHECK(from_second.at("trades").as_array().size() == 3);

    auto csv = x.http->request("GET", std::string("/v1/markets/") + kMarket + "/trades", "", {{"Accept", "text/csv"}});
    REQUIRE(csv.status == 200);
    CHECK(csv.headers.at("content-type").rfind("text/csv", 0) == 0);
    CHECK(csv.body.rfind("trade_id,time,bucket,price,price_normalized,", 0) == 0);
    CHECK(std::count(csv.body.begin(), csv.body.end(), '\n') == 1 + static_cast<long>(fills.size()));
    auto candles_csv = x.http->request("GET", std::string("/v1/markets/") + kMarket + "/candles?interval=1d", "",
                                       {{"Accept", "text/csv"}});
    REQUIRE(candles_csv.status == 200);
    CHECK(candles_csv.body.rfind("start,open,high,low,close,vwap,volume_gpu_hours,trades,", 0) == 0);
    auto index_csv = x.http->request("GET", std::string("/v1/index/") + kMarket, "", {{"Accept", "text/csv"}});
    REQUIRE(index_csv.status == 200);
    CHECK(index_csv.body.rfind("day,value,value_normalized,volume_gpu_hours,trades,final\n", 0) == 0);
  }

  SECTION("unknown markets are 404 and bad parameters 400") {
    for (const char* p : {"/v1/markets/NOPE/trades", "/v1/markets/NOPE/candles", "/v1/markets/NOPE/forward-curve",
                          "/v1/markets/NOPE/stats", "/v1/index/NOPE"}) {
      CHECK(x.get(p, 404).at("error").at("code").as_string() == "not_found");
    }
    std::string m = std::string("/v1/markets/") + kMarket;
    for (auto [path, field] : {std::pair{m + "/candles?interval=2h", "interval"}, {m + "/candles?bucket=2027-13", "bucket"},
                               {m + "/candles?from=yesterday", "from"},
                               {m + "/candles?interval=1m&from=2020-01-01&to=2021-01-01", "from"},
                               {m + "/candles?from=2027-01-02&to=2027-01-01", "from"},
                               {m + "/trades?limit=0", "limit"}, {m + "/trades?cursor=x", "cursor"},
                               {m + "/trades?to=2027-02-30", "to"},
                               {std::string("/v1/index/") + kMarket + "?from=1990-01-01&to=2027-01-01", "from"}}) {
      auto e = x.get(path, 400);
      CHECK(e.at("error").at("code").as_string() == "invalid_field");
      CHECK(e.at("error").at("field").as_string() == field);
    }
    // The limits count the periods that start in [from, to): 5,000 hours and 1,000 days exactly, and
    // one second more starts one more.
    CHECK(x.get(m + "/candles?interval=1h&from=2027-01-01T00:00:00Z&to=2027-07-28T08:00:00Z", 200)
              .at("candles").as_array().empty());
    CHECK(x.get(m + "/candles?interval=1h&from=2027-01-01T00:00:00Z&to=2027-07-28T08:00:01Z", 400)
              .at("error").at("field").as_string() == "from");
    CHECK(x.get(std::string("/v1/index/") + kMarket + "?from=2027-01-01&to=2029-09-27", 200)
              .at("index").as_array().empty());
    CHECK(x.get(std::string("/v1/index/") + kMarket + "?from=2027-01-01&to=2029-09-27T00:00:01Z", 400)
              .at("error").at("field").as_string() == "from");
  }
}

TEST_CASE("the forward curve: last, 7-day VWAP, best bid and ask, open interest from reserved leases") {
  Exchange x;
  auto plain = x.pool(false);
  // Two tenors ahead: the first day of the month two months from now, and of the month after.
  auto month_start = [](std::int64_t t, int ahead) {
    auto s = at(t);
    int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)) - 1 + ahead;
    y += m / 12, m = m % 12 + 1;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04d-%02d-01T00:00:00Z", y, m);
    return *gpuex::parse_rfc3339(buf);
  };
  auto t1 = month_start(x.now(), 2), t2 = month_start(x.now(), 3);
  auto tenor1 = at(t1).substr(0, 7), tenor2 = at(t2).substr(0, 7);
  auto f1 = x.trade(plain, false, "2.1000", 4, {{"start", at(t1)}, {"end", at(t1 + 86400)}});
  auto f2 = x.trade(plain, false, "2.4000", 2, {{"start", at(t1 + 86400)}, {"end", at(t1 + 3 * 86400)}});
  auto f3 = x.trade(plain, false, "1.9000", 1, {{"start", at(t1 + 3600)}, {"end", at(t1 + 7200)}});
  REQUIRE(f1.bucket == tenor1);
  REQUIRE(f3.bucket == tenor1);
  // The later tenor: a resting bid and a resting ask that do not cross.
  auto bid = x.post(x.buyer, "/v1/orders",
                    {{"side", "buy"}, {"market", kMarket}, {"price", "1.2500"}, {"quantity", 3}, {"start", at(t2)},
                     {"end", at(t2 + 86400)}});
  REQUIRE(bid.status == 201);
  x.ask(plain, "5.5000", 8, t2, t2 + 10 * 86400);
  // A tenor whose only resting order is a constrained bid: counted apart from the book's levels, so
  // the tenor has no best bid, but it has a resting order.
  auto t3 = month_start(x.now(), 4);
  auto constrained = x.post(x.buyer, "/v1/orders",
                            {{"side", "buy"}, {"market", kMarket}, {"price", "1.1000"}, {"quantity", 2},
                             {"start", at(t3)}, {"end", at(t3 + 86400)}, {"green_only", true}});
  REQUIRE(constrained.status == 201);

  auto curve = x.get(std::string("/v1/markets/") + kMarket + "/forward-curve");
  INFO(json::serialize(curve));
  const auto& tenors = curve.at("tenors").as_array();
  REQUIRE(tenors.size() == 3);
  CHECK(tenors[2].at("tenor").as_string() == at(t3).substr(0, 7));
  CHECK(tenors[2].at("best_bid").is_null());
  CHECK(tenors[2].at("best_ask").is_null());
  const auto& a = tenors[0];
  CHECK(a.at("tenor").as_string() == tenor1);
  CHECK(a.at("last").as_string() == "1.9000");
  CHECK(a.at("last_normalized").as_string() == normalized_of(1900000));
  I128 gs = f1.gpu_seconds() + f2.gpu_seconds() + f3.gpu_seconds();
  I128 notional = I128(f1.gpu_seconds()) * f1.price + I128(f2.gpu_seconds()) * f2.price + I128(f3.gpu_seconds()) * f3.price;
  // By hand: (96 × 2.10 + 96 × 2.40 + 1 × 1.90) / 193 = 433.9 / 193 = 2.248186…
  CHECK(a.at("vwap_7d").as_string() == "2.248187");
  CHECK(micros(a.at("vwap_7d")) == half_even(notional, gs));
  CHECK(a.at("volume_7d_gpu_hours").as_string() == "193.0");
  CHECK(a.at("open_interest_gpu_hours").as_string() == "193.0");
  CHECK(a.at("best_bid").is_null());
  const auto& b = tenors[1];
  CHECK(b.at("tenor").as_string() == tenor2);
  CHECK(b.at("last").is_null());
  CHECK(b.at("best_bid").as_string() == "1.2500");
  CHECK(b.at("best_ask").as_string() == "5.5000");
  CHECK(b.at("best_ask_normalized").as_string() == normalized_of(5500000));
  CHECK(b.at("open_interest_gpu_hours").as_string() == "0.0");

  // A released reserved lease leaves the open interest.
  auto leases = x.http->request("GET", "/v1/leases", "", bearer(x.buyer.api_key)).json();
  std::string lease_of_f2;
  for (const auto& l : leases.at("leases").as_array()) {
    if (l.at("quantity").as_int64() == 2) lease_of_f2 = std::string(l.at("id").as_string());
  }
  REQUIRE(!lease_of_f2.empty());
  auto rel = x.post(x.buyer, "/v1/leases/" + lease_of_f2 + "/release", json::object{});
  INFO(rel.body);
  REQUIRE(rel.status == 200);
  auto after = x.get(std::string("/v1/markets/") + kMarket + "/forward-curve");
  CHECK(after.at("tenors").at(0).at("open_interest_gpu_hours").as_string() == "97.0");

  // Resting bids in 121 more months, 5 to 125 ahead: the curve shows the nearest 120 tenors, months
  // 2 to 121 ahead.
  for (int ahead = 5; ahead <= 125; ++ahead) {
    auto start = month_start(x.now(), ahead);
    REQUIRE(x.post(x.buyer, "/v1/orders",
                   {{"side", "buy"}, {"market", kMarket}, {"price", "1.0000"}, {"quantity", 1}, {"start", at(start)},
                    {"end", at(start + 3600)}})
                .status == 201);
  }
  auto capped = x.get(std::string("/v1/markets/") + kMarket + "/forward-curve").at("tenors").as_array();
  REQUIRE(capped.size() == 120);
  CHECK(capped.front().at("tenor").as_string() == tenor1);
  CHECK(capped.back().at("tenor").as_string() == at(month_start(x.now(), 121)).substr(0, 7));
}

TEST_CASE("rollups equal a recomputation from raw trades after a random load with a restart and a crash") {
  Exchange x;
  std::vector<std::pair<std::string, bool>> pools{{x.pool(true), true}, {x.pool(false), false}, {x.pool(false), false}};
  std::mt19937 rng(20261129);
  auto load = [&](int orders) {
    for (int i = 0; i < orders; ++i) {
      auto& [pool, green] = pools[rng() % pools.size()];
      int ticks = 15000 + static_cast<int>(rng() % 10000);
      std::string price = gpuex::format_price(ticks * 100);
      auto a = x.ask(pool, price.c_str(), 8, x.now() - 60, x.now() + 120 * 86400);
      int gpus = 1 + static_cast<int>(rng() % 8);
      json::object bid{{"side", "buy"}, {"market", kMarket}, {"price", "3.0000"}, {"quantity", gpus},
                       {"time_in_force", "ioc"}};
      if (rng() % 3 == 0) {
        auto s = x.now() + 86400 * (5 + static_cast<std::int64_t>(rng() % 60));
        bid["start"] = at(s), bid["end"] = at(s + 3600 * (1 + static_cast<std::int64_t>(rng() % 48)));
      } else {
        bid["duration"] = 600 * (1 + static_cast<int>(rng() % 12));
      }
      REQUIRE(x.post(x.buyer, "/v1/orders", bid).status == 201);
      x.cancel(x.provider, a);
      if (rng() % 4 == 0) x.advance(static_cast<std::int64_t>(rng() % 5000));
    }
  };
  load(40);
  x.restart();
  load(40);
  x.crash();  // the daily index's in-memory ladders are read back from the store
  load(20);
  x.advance(86400 * 10);  // some forward leases start: they leave the open interest
  load(10);
  // A preemption of a reserved interruptible lease (docs/market-rules.md, "Interruptible capacity"):
  // the part that goes on is a new lease that keeps the original trade, which no trade names.
  auto spot_pool = x.pool(false, kMarket, "spot");
  x.ask(spot_pool, "1.0000", 8, x.now() - 60, x.now() + 60 * 86400);
  auto start = x.now() + 20 * 86400;
  auto held = x.post(x.buyer, "/v1/orders",
                     {{"side", "buy"}, {"market", kMarket}, {"price", "1.0000"}, {"quantity", 8}, {"start", at(start)},
                      {"end", at(start + 10 * 86400)}, {"interruptible", true}, {"time_in_force", "ioc"}});
  INFO(held.body);
  REQUIRE(held.status == 201);
  REQUIRE(held.json().at("fills").as_array().size() == 1);
  auto other = create_account(x.db.dsn(), "buyer2", "trade,read");
  auto taker = x.post(other, "/v1/orders",
                      {{"side", "buy"}, {"market", kMarket}, {"price", "2.0000"}, {"quantity", 4},
                       {"start", at(start + 86400)}, {"end", at(start + 86400 + 3600)}, {"interruptible", true},
                       {"time_in_force", "ioc"}});
  INFO(taker.body);
  REQUIRE(taker.status == 201);
  REQUIRE(taker.json().at("fills").as_array().size() == 1);

  auto db = gpuex::store::PgConnection::connect(x.db.dsn());
  REQUIRE(db.exec("SELECT count(*) FROM leases l WHERE status = 'reserved' AND "
                  "NOT EXISTS (SELECT 1 FROM trades t WHERE t.lease_id = l.id)")
              .integer(0, 0) == 1);
  REQUIRE(db.exec("SELECT count(*) FROM trades").integer(0, 0) >= 60);
  // Candles recomputed with a plain GROUP BY: no row differs, either way.
  const char* recomputed = R"sql(
    SELECT t.market, t.bucket, i.s, t.at / i.s * i.s,
           (array_agg(price_micros ORDER BY at, id))[1], (array_agg(price_micros ORDER BY at DESC, id DESC))[1],
           max(price_micros), min(price_micros), count(*), sum(quantity::numeric * (end_at - start_at)),
           sum(price_micros::numeric * quantity * (end_at - start_at)),
           sum(CASE WHEN green_tier <> 'none' THEN quantity::numeric * (end_at - start_at) ELSE 0 END),
           sum(greatest(list_price_micros - price_micros, 0)::numeric * quantity * (end_at - start_at))
    FROM trades t, (VALUES (60), (300), (3600), (86400)) i (s)
    GROUP BY 1, 2, 3, 4)sql";
  const char* stored = R"sql(
    SELECT market, bucket, interval_s, period_start, open_micros, close_micros, high_micros, low_micros, trades,
           gpu_seconds, notional, green_gpu_seconds, discount FROM candles)sql";
  auto diff = [&](const std::string& a, const std::string& b) {
    return db.exec(("SELECT count(*) FROM ((" + a + ") EXCEPT (" + b + ")) d").c_str()).integer(0, 0);
  };
  CHECK(db.exec(stored).rows() > 0);
  CHECK(diff(recomputed, stored) == 0);
  CHECK(diff(stored, recomputed) == 0);
  CHECK(diff("SELECT DISTINCT ON (market, bucket) market, bucket, at, id, price_micros FROM trades "
             "ORDER BY market, bucket, at DESC, id DESC",
             "SELECT market, bucket, at, trade_id, price_micros FROM last_trades") == 0);
  // Open interest from the leases table itself: each reserved lease under the bucket of its trade.
  const char* oi = R"sql(
    SELECT l.market, t.bucket, sum((l.lease->>'quantity')::numeric *
                                   (extract(epoch FROM (l.lease->>'end')::timestamptz) -
                                    extract(epoch FROM (l.lease->>'start')::timestamptz)))
    FROM leases l JOIN trades t ON t.id = (l.lease->>'trade_id')::bigint WHERE l.status = 'reserved'
    GROUP BY 1, 2)sql";
  const char* stored_oi = "SELECT market, bucket, gpu_seconds FROM open_interest WHERE gpu_seconds <> 0";
  CHECK(db.exec(oi).rows() > 0);
  CHECK(diff(oi, stored_oi) == 0);
  CHECK(diff(stored_oi, oi) == 0);
  // Migration 0014 rebuilds the same open interest from nothing (as on a database whose 0005
  // backfill left the split-off leases out).
  db.exec("TRUNCATE reserved_leases, open_interest");
  db.exec("DELETE FROM schema_migrations WHERE version = 14");
  REQUIRE(run_gpuexd({"migrate", "--dsn", x.db.dsn()}).exit_code == 0);
  CHECK(diff(oi, stored_oi) == 0);
  CHECK(diff(stored_oi, oi) == 0);
  // The index, per trade, in C++.
  auto rows = db.exec("SELECT at / 86400 * 86400, price_micros, quantity::bigint * (end_at - start_at) FROM trades "
                      "WHERE bucket = 'spot' AND market = $1",
                      {std::string(kMarket)});
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, I128>>> days;
  for (int i = 0; i < rows.rows(); ++i) days[rows.integer(i, 0)].emplace_back(rows.integer(i, 1), rows.integer(i, 2));
  auto index = db.exec("SELECT day, gpu_seconds, trimmed_x20 FROM daily_index WHERE market = $1 ORDER BY day",
                       {std::string(kMarket)});
  REQUIRE(static_cast<std::size_t>(index.rows()) == days.size());
  int r = 0;
  for (const auto& [day, trades] : days) {
    CHECK(index.integer(r, 0) == day);
    I128 gs = 0;
    for (auto& t : trades) gs += t.second;
    CHECK(index.integer(r, 1) == static_cast<long long>(gs));
    auto body = x.get(std::string("/v1/index/") + kMarket + "?from=" + at(day) + "&to=" + at(day + 86400));
    CHECK(micros(body.at("index").at(0).at("value")) == trimmed_index(trades));
    ++r;
  }
}

TEST_CASE("monthly trade partitions are made ahead, and a month's rows already in the default partition move into its own") {
  TestDatabase tdb;
  REQUIRE(run_gpuexd({"migrate", "--dsn", tdb.dsn()}).exit_code == 0);
  auto db = gpuex::store::PgConnection::connect(tdb.dsn());
  auto partition_of = [&](const std::string& id) {
    return std::string(db.exec(("SELECT tableoid::regclass::text FROM trades WHERE id = " + id).c_str()).text(0, 0));
  };
  // The migration made this month's partition and the next ones.
  auto month = at(unix_now()).substr(0, 7);
  month[4] = '_';
  CHECK(db.exec(("SELECT to_regclass('trades_" + month + "') IS NOT NULL").c_str()).text(0, 0) == "t");
  // A trade of March 2025 (1741000000 = 2025-03-03) has no partition yet: it lands in the default one.
  db.exec(R"sql(
    INSERT INTO trades (id, at, market, bucket, buy_order_id, sell_order_id, buyer_id, seller_id, pool_id, lease_id,
                        quantity, start_at, end_at, price_micros, list_price_micros, green_discount_bps, preemption,
                        taker_side, print, buyer_fill, seller_fill)
    VALUES (7, 1741000000, 'H100-SXM-80G', 'spot', 1, 2, 1, 1, 1, 1, 4, 1741000000, 1741003600, 2000000, 2000000, 0,
            false, 'buy', '{}', '{}', '{}'))sql");
  CHECK(partition_of("7") == "trades_default");
  CHECK(db.exec("SELECT gpuex_ensure_trade_partitions(1741000000, 1741000001)").integer(0, 0) == 1);
  CHECK(partition_of("7") == "trades_2025_03");
  CHECK(db.exec("SELECT count(*) FROM trades").integer(0, 0) == 1);
  // Bounds: the partition holds exactly March 2025 (2025-03-01 .. 2025-04-01 UTC).
  auto bound = db.exec("SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'trades_2025_03'");
  CHECK(std::string(bound.text(0, 0)) == "FOR VALUES FROM ('1740787200') TO ('1743465600')");
  // Made once: a second call creates nothing.
  CHECK(db.exec("SELECT gpuex_ensure_trade_partitions(1741000000, 1741000001)").integer(0, 0) == 0);

  // That row's print is empty, which gpuexd never writes: reading it fails that request alone, and the
  // server lives on (an exception of a read job must not leave its thread).
  Gpuexd server(tdb.dsn(), {}, false);
  HttpClient http(server.port());
  CHECK(http.get("/v1/markets/H100-SXM-80G/trades?from=2025-03-01&to=2025-04-01").status == 503);
  CHECK(http.get("/healthz").status == 200);
  CHECK(http.get("/v1/markets/H100-SXM-80G/trades?from=2025-04-01").status == 200);
}
