// POST /v1/quote over real HTTP against a real PostgreSQL: all-in prices computed by hand, errors, and
// proof by the state digest that a quote changes nothing.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

#include "server/rfc3339.hpp"
#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;

namespace {


struct QuoteMarket : TestExchange {
  CreatedAccount admin = account("ops", "admin"), provider = account("provider", "provide,read");

  explicit QuoteMarket(std::vector<std::string> args = {}) { start(std::move(args)); }

  HttpReply post(const CreatedAccount& who, const std::string& path, const json::value& body) {
    return call(who, "POST", path, body);
  }

  // A pool of 8 H100s with the given fees and energy, and an ask for all of them for 30 days.
  json::object pool_with_ask(const char* region, const char* egress, const char* storage, const char* price,
                             const char* pue = "1.4", int renewable = 20, int carbon = 450) {
    auto r = post(provider, "/v1/pools",
                  {{"market", "H100-SXM-80G"}, {"region", region}, {"tier", "bare_metal"}, {"gpus_per_node", 8},
                   {"nodes", 1}, {"nvlink", true}, {"fabric", "infiniband"}, {"fabric_gbps", 400}, {"sla_pct", "99.9"},
                   {"pue", pue}, {"renewable_pct", renewable}, {"carbon_g_per_kwh", carbon},
                   {"egress_usd_per_gb", egress}, {"storage_usd_per_gb_month", storage}, {"ip_usd_per_month", "3.00"}});
    INFO(r.body);
    REQUIRE(r.status == 201);
    auto pool = r.json().as_object();
    auto a = post(provider, "/v1/orders",
                  {{"side", "sell"}, {"pool_id", pool.at("id")}, {"price", price}, {"quantity", 8},
                   {"start", at(unix_now() - 60)}, {"end", at(unix_now() + 30 * 86400)}});
    INFO(a.body);
    REQUIRE(a.status == 201);
    return pool;
  }

  HttpReply quote(const json::object& body) { return http->request("POST", "/v1/quote", json::serialize(body)); }

  std::string digest() {
    auto r = http->request("GET", "/v1/admin/state-digest", "", bearer(admin.api_key));
    REQUIRE(r.status == 200);
    return std::string(r.json().at("digest").as_string());
  }
};

json::object buy(const char* price, int gpus) {
  return {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", price}, {"quantity", gpus}, {"duration", 3600}};
}

// Micro-dollars as the wire shows prices: 4 to 6 decimals ("2.0400", "2.028699"), written out here.
std::string usd(std::int64_t micros) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%06lld", static_cast<long long>(micros / 1'000'000),
                static_cast<long long>(micros % 1'000'000));
  std::string s = buf;
  while (s.size() > s.find('.') + 5 && s.back() == '0') s.pop_back();
  return s;
}

std::string str(const json::value& v) { return std::string(v.as_string()); }
std::string code(const HttpReply& r) { return str(r.json().at("error").at("code")); }
std::string field(const HttpReply& r) { return str(r.json().at("error").at("field")); }

}  // namespace

TEST_CASE("a quote prices each fill all-in by hand-computed sums, and changes nothing", "[pg][quote]") {
  // No tick while the test runs: the digest covers the engine's time, which only commands and ticks move.
  QuoteMarket m({"--tick-ms", "60000"});
  auto de = m.pool_with_ask("DE", "0.0100", "0.1000", "2.0000");
  auto us = m.pool_with_ask("US", "0.0050", "0.0730", "2.1000");
  const std::string digest = m.digest();
  const auto book_before = m.http->get("/v1/markets/H100-SXM-80G/book").body;

  auto body = buy("2.5000", 12);
  body["egress_gb_per_gpu_hour"] = "1.5";
  body["storage_gb"] = 100;
  auto r = m.quote(body);  // no key: quotes are public
  INFO(r.body);
  REQUIRE(r.status == 200);
  auto q = r.json().as_object();
  CHECK(q.at("quantity").as_int64() == 12);
  CHECK(q.at("filled_quantity").as_int64() == 12);
  CHECK(str(q.at("egress_gb_per_gpu_hour")) == "1.5");
  CHECK(str(q.at("storage_gb")) == "100");
  const auto& fills = q.at("fills").as_array();
  REQUIRE(fills.size() == 2);

  // DE: 2.00 + 1.5 GB x 0.01 + 100 GB x 0.10 / 730 = 2.00 + 0.015 + 0.0136986... = 2.0286986... -> 2.028699
  const auto& f0 = fills[0].as_object();
  CHECK(str(f0.at("pool").at("id")) == str(de.at("id")));
  CHECK(f0.at("quantity").as_int64() == 8);
  CHECK(str(f0.at("price")) == "2.0000");
  CHECK(str(f0.at("list_price")) == "2.0000");
  CHECK(f0.at("green_discount_bps").as_int64() == 0);
  CHECK(str(f0.at("all_in_usd_per_gpu_hour")) == "2.028699");
  const auto& p0 = f0.at("pool").as_object();
  CHECK(str(p0.at("region")) == "DE");
  CHECK(str(p0.at("tier")) == "bare_metal");
  CHECK(p0.at("nvlink").as_bool());
  CHECK(str(p0.at("fabric")) == "infiniband");
  CHECK(p0.at("fabric_gbps").as_int64() == 400);
  CHECK(str(p0.at("sla_pct")) == "99.9");
  CHECK(str(p0.at("green_tier")) == "none");
  CHECK_FALSE(p0.at("verified").as_bool());
  CHECK(p0.at("pue").is_null());  // self-declared energy values are not published
  CHECK(str(p0.at("egress_usd_per_gb")) == "0.010000");
  CHECK(str(p0.at("storage_usd_per_gb_month")) == "0.100000");
  CHECK(str(p0.at("ip_usd_per_month")) == "3.000000");  // shown, not in the all-in
  CHECK(str(f0.at("end")) == at(gpuex::parse_rfc3339(str(f0.at("start"))).value() + 3600));

  // US: 2.10 + 1.5 x 0.005 + 100 x 0.073 / 730 = 2.10 + 0.0075 + 0.01 = 2.1175
  const auto& f1 = fills[1].as_object();
  CHECK(str(f1.at("pool").at("id")) == str(us.at("id")));
  CHECK(f1.at("quantity").as_int64() == 4);
  CHECK(str(f1.at("all_in_usd_per_gpu_hour")) == "2.1175");

  // Without usage the all-in is the price.
  r = m.quote(buy("2.5000", 4));
  REQUIRE(r.status == 200);
  CHECK(str(r.json().at("fills").at(0).at("all_in_usd_per_gpu_hour")) == "2.0000");

  // Nothing changed: the engine's digest and the book are as before; the asks are still all there.
  CHECK(m.digest() == digest);
  CHECK(m.http->get("/v1/markets/H100-SXM-80G/book").body == book_before);
}

TEST_CASE("the all-in is rounded once, half to even, at the end", "[pg][quote]") {
  QuoteMarket m;
  // Fees chosen so the parts are exact: egress 1 GB x 0.000001 = 1 micro-dollar; storage 1 GB x 0.000365 / 730
  // = 0.5 micro-dollars.
  m.pool_with_ask("FI", "0.000001", "0.000365", "2.0000");
  auto body = buy("2.0000", 8);
  body["storage_gb"] = "1";
  auto r = m.quote(body);
  INFO(r.body);
  REQUIRE(r.status == 200);
  // 2,000,000.5 micro-dollars -> 2,000,000 (even).
  CHECK(str(r.json().at("fills").at(0).at("all_in_usd_per_gpu_hour")) == "2.0000");
  body["egress_gb_per_gpu_hour"] = 1;
  r = m.quote(body);
  REQUIRE(r.status == 200);
  // 2,000,001.5 -> 2,000,002 (even); rounding each part apart would give 2,000,001.
  CHECK(str(r.json().at("fills").at(0).at("all_in_usd_per_gpu_hour")) == "2.000002");
  body["egress_gb_per_gpu_hour"] = "0.5";
  body["storage_gb"] = "0.001";
  r = m.quote(body);
  REQUIRE(r.status == 200);
  // 2,000,000 + 0.5 + 0.0005 = 2,000,000.5005 -> 2,000,001 (above the half).
  CHECK(str(r.json().at("fills").at(0).at("all_in_usd_per_gpu_hour")) == "2.000001");
}

TEST_CASE("a quote on a verified green pool shows the discount and the verified energy values", "[pg][quote]") {
  QuoteMarket m;
  auto pool = m.pool_with_ask("SE", "0.0200", "0", "2.0000", "1.1", 90, 50);
  auto v = m.post(m.admin, "/v1/pools/" + str(pool.at("id")) + "/verify",
                  {{"verified", true}, {"expires_at", at(unix_now() + 90 * 86400)}, {"evidence", "audit"}});
  INFO(v.body);
  REQUIRE(v.status == 200);
  const std::int64_t bps = v.json().at("green_discount_bps").as_int64();
  REQUIRE(bps > 0);
  auto body = buy("2.5000", 8);
  body["green_only"] = true;
  body["egress_gb_per_gpu_hour"] = 2;
  auto r = m.quote(body);
  INFO(r.body);
  REQUIRE(r.status == 200);
  const auto reply = r.json();
  const auto& f = reply.at("fills").at(0).as_object();
  // 2.0000 less bps, down to the 0.0001 tick (in micro-dollars: a multiple of 100).
  const std::int64_t price = 2'000'000 * (10'000 - bps) / 10'000 / 100 * 100;
  CHECK(f.at("green_discount_bps").as_int64() == bps);
  CHECK(str(f.at("list_price")) == "2.0000");
  CHECK(str(f.at("price")) == usd(price));
  // + 2 GB x 0.02 = 0.04
  CHECK(str(f.at("all_in_usd_per_gpu_hour")) == usd(price + 40'000));
  const auto& p = f.at("pool").as_object();
  CHECK(p.at("verified").as_bool());
  CHECK(str(p.at("green_tier")) != "none");
  CHECK(str(p.at("pue")) == "1.1");
  CHECK(str(p.at("renewable_pct")) == "90");
  CHECK(str(p.at("carbon_g_per_kwh")) == "50");
}

TEST_CASE("quote errors use the order codes", "[pg][quote]") {
  QuoteMarket m;
  m.pool_with_ask("DE", "0", "0", "2.0000");
  auto bad = [&](json::object body, unsigned status, const char* expect_code, const char* expect_field) {
    auto r = m.quote(body);
    INFO(json::serialize(body) << " -> " << r.body);
    REQUIRE(r.status == status);
    CHECK(code(r) == expect_code);
    if (expect_field) CHECK(field(r) == expect_field);
  };
  auto b = buy("2.5000", 4);
  b["market"] = "NO-SUCH-GPU";
  bad(b, 404, "not_found", "market");
  bad({{"side", "sell"}, {"pool_id", "1"}, {"price", "2.0000"}, {"quantity", 8}, {"start", at(unix_now())},
       {"end", at(unix_now() + 3600)}},
      400, "invalid_field", "side");
  b = buy("2.5000", 4);
  b["egress_gb_per_gpu_hour"] = "-1";
  bad(b, 400, "invalid_field", "egress_gb_per_gpu_hour");
  b["egress_gb_per_gpu_hour"] = "0.0001";  // at most three decimals
  bad(b, 400, "invalid_field", "egress_gb_per_gpu_hour");
  b = buy("2.5000", 4);
  b["storage_gb"] = "lots";
  bad(b, 400, "invalid_field", "storage_gb");
  b = buy("2.5000", 4);
  b["storage_gb"] = 1'000'001;
  bad(b, 400, "invalid_field", "storage_gb");
  b = buy("2.5000", 4);
  b["colour"] = "blue";
  bad(b, 400, "unknown_field", "colour");
  b = buy("2.5000", 4);
  b.erase("duration");
  bad(b, 400, "missing_field", "duration");
  bad(buy("abc", 4), 400, "invalid_field", "price");
  bad(buy("2.00005", 4), 422, "off_tick", "price");
  b = buy("2.5000", 3);
  b["min_chunk"] = 2;
  bad(b, 422, "quantity_not_multiple_of_chunk", "quantity");
  b = buy("2.5000", 4);
  b.erase("duration");
  b["start"] = at(unix_now() - 7200);
  b["end"] = at(unix_now() - 3600);
  bad(b, 422, "window_in_past", "start");
  auto r = m.http->request("POST", "/v1/quote", "{not json");
  CHECK(r.status == 400);
  CHECK(code(r) == "malformed_json");

  // A halted market quotes nothing: the placement would be refused.
  REQUIRE(m.post(m.admin, "/v1/markets/H100-SXM-80G/halt", json::object{}).status == 200);
  bad(buy("2.5000", 4), 422, "market_halted", "market");
}

TEST_CASE("quotes are limited per client IP like other public data", "[pg][quote]") {
  QuoteMarket m({"--ip-rate", "1", "--ip-burst", "3"});
  unsigned limited = 0;
  std::string retry_after;
  for (int i = 0; i < 10; ++i) {
    auto r = m.quote(buy("2.5000", 4));
    if (r.status == 429) {
      ++limited;
      retry_after = r.headers["retry-after"];
    } else {
      CHECK(r.status == 200);
    }
  }
  CHECK(limited >= 1);  // a burst of 3, then one a second: ten quotes cannot all pass
  CHECK_FALSE(retry_after.empty());
}
