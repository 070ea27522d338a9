// Edges of the HTTP API found by reading it against API.md: time's own events never inside another
// command's answer, path captures percent-decoded, and what a pool says of an expired verification.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "support/cluster.hpp"
#include "support/http_client.hpp"

using namespace gpuex::test;
namespace json = boost::json;

namespace {

struct Exchange : TestExchange {
  CreatedAccount admin = account("ops", "admin"), provider = account("provider", "provide,read"),
                 buyer = account("buyer", "trade,read"), other = account("other", "trade,provide,read");

  explicit Exchange(std::vector<std::string> args = {}) { start(std::move(args)); }

  json::object ok(unsigned status, const HttpReply& r) {
    INFO(r.body);
    REQUIRE(r.status == status);
    return r.json().as_object();
  }
  json::object pool(const CreatedAccount& who) {
    return ok(201, call(who, "POST", "/v1/pools",
                        {{"market", "H100-SXM-80G"}, {"region", "IS"}, {"tier", "bare_metal"}, {"gpus_per_node", 8},
                         {"nodes", 1}, {"pue", "1.1"}, {"renewable_pct", 90}, {"carbon_g_per_kwh", 50}}));
  }
  // A buy that rests (no asks) until `expire_at`.
  std::string gtd_bid(std::int64_t expire_at) {
    auto body = ok(201, call(buyer, "POST", "/v1/orders",
                             {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", "2.0000"}, {"quantity", 1},
                              {"duration", 3600}, {"time_in_force", "gtd"}, {"expire_at", at(expire_at)}}));
    REQUIRE(body.at("order").at("status") == "open");
    return std::string(body.at("order").at("id").as_string());
  }
};

std::string str(const json::value& v) { return std::string(v.as_string()); }

}  // namespace

TEST_CASE("what time did since the last command is a tick of its own, never part of another account's answer") {
  // No periodic tick during the test (the first is due a minute after the start): what time does waits
  // for the next command, which must not carry it in its answer. Three waves, one per answer checked.
  Exchange x({"--tick-ms", "60000"});
  auto green = x.pool(x.provider);
  const std::string green_id = str(green.at("id"));
  const auto t0 = std::chrono::system_clock::now();
  const std::int64_t t0_s = unix_now();
  x.ok(200, x.call(x.admin, "POST", "/v1/pools/" + green_id + "/verify",
                   {{"verified", true}, {"expires_at", at(t0_s + 2)}, {"evidence", "audit 7"}}));
  auto cancelled_by_time = x.gtd_bid(t0_s + 4);
  auto amended = x.gtd_bid(t0_s + 6);
  auto wait_until = [&](int seconds) {
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(seconds * 1000 + 700));
  };

  // 1. The verification ended: another provider's new pool is answered with that pool, not the green one.
  wait_until(2);
  auto mine = x.pool(x.other);
  CHECK(str(mine.at("id")) != green_id);
  CHECK(str(mine.at("provider")) == x.other.account_id);
  CHECK(mine.at("verified") == false);
  CHECK(mine.at("evidence").is_null());
  // The green pool is no longer verified (its tier fell to none with it).
  auto was_green = x.ok(200, x.call(x.provider, "GET", "/v1/pools/" + green_id));
  CHECK(was_green.at("verified") == false);
  CHECK(was_green.at("green_tier") == "none");

  // 2. A buy expired: another account's cancel-all cancels nothing and lists nothing.
  wait_until(4);
  auto cancelled = x.ok(200, x.call(x.other, "DELETE", "/v1/orders"));
  CHECK(cancelled.at("cancelled").as_array().empty());
  CHECK(x.ok(200, x.call(x.buyer, "GET", "/v1/orders/" + cancelled_by_time)).at("status") == "expired");

  // 3. The order to amend expired: the amend finds no open order (404, as for any ended order).
  wait_until(6);
  auto amend = x.call(x.buyer, "PATCH", "/v1/orders/" + amended, {{"quantity", 1}});
  INFO(amend.body);
  CHECK(amend.status == 404);
  CHECK(amend.json().at("error").at("code") == "not_found");
}

TEST_CASE("path captures are percent-decoded: a client_order_id with ':' is found as %3A") {
  Exchange x;
  auto placed = x.ok(201, x.call(x.buyer, "POST", "/v1/orders",
                                 {{"side", "buy"}, {"market", "H100-SXM-80G"}, {"price", "2.0000"}, {"quantity", 1},
                                  {"duration", 3600}, {"client_order_id", "run:7"}}));
  const auto id = str(placed.at("order").at("id"));
  CHECK(str(x.ok(200, x.call(x.buyer, "GET", "/v1/orders/by-client-id/run%3A7")).at("id")) == id);
  CHECK(str(x.ok(200, x.call(x.buyer, "GET", "/v1/orders/by-client-id/run:7")).at("id")) == id);
  // Escapes that decode to no text a client_order_id can hold name nothing.
  for (const char* path : {"/v1/orders/by-client-id/%FF", "/v1/orders/by-client-id/run%007"}) {
    INFO(path);
    auto r = x.call(x.buyer, "GET", path);
    INFO(r.body);
    CHECK(r.status == 404);
  }
}

TEST_CASE("an open ask read later shows the hours that passed as lapsed and offers only what is ahead") {
  Exchange x({"--test-clock"});
  const std::string pool_id = str(x.pool(x.provider).at("id"));
  const std::int64_t start = unix_now() + 60;
  auto placed = x.ok(201, x.call(x.provider, "POST", "/v1/orders",
                                 {{"side", "sell"}, {"pool_id", pool_id}, {"price", "2.0000"}, {"quantity", 4},
                                  {"start", at(start)}, {"end", at(start + 10 * 3600)}}));
  const std::string id = str(placed.at("order").at("id"));
  CHECK(placed.at("order").at("remaining_gpu_hours") == "40.0");
  CHECK(placed.at("order").at("lapsed_gpu_hours") == "0.0");

  // Three hours into the window (the test clock also runs with the wall clock: a few seconds more).
  x.ok(200, x.call(x.admin, "POST", "/v1/admin/clock", {{"advance_s", 60 + 3 * 3600}}));
  auto hours = [](const json::value& v) { return std::stod(std::string(v.as_string())); };
  auto check_aged = [&](const json::object& o) {
    INFO(json::serialize(o));
    const double lapsed = hours(o.at("lapsed_gpu_hours")), remaining = hours(o.at("remaining_gpu_hours"));
    CHECK(lapsed >= 12.0);
    CHECK(lapsed < 12.2);  // 4 GPUs x 3 h, plus the seconds the test itself took
    CHECK(lapsed + remaining == Approx(40.0).margin(1e-6));
    const auto& free = o.at("free").as_array();
    REQUIRE(free.size() == 1);
    CHECK(free[0].as_array()[0].as_string() >= at(start + 3 * 3600));  // nothing offered in the past
    CHECK(free[0].as_array()[1].as_string() == at(start + 10 * 3600));
    CHECK(free[0].as_array()[2] == 4);
  };
  check_aged(x.ok(200, x.call(x.provider, "GET", "/v1/orders/" + id)));
  auto listed = x.ok(200, x.call(x.provider, "GET", "/v1/orders"));
  REQUIRE(listed.at("orders").as_array().size() == 1);
  check_aged(listed.at("orders").as_array()[0].as_object());

  // Cancelled, it offers nothing: no step, not even the hours that lapsed (docs/market-rules.md: "free 0").
  auto cancelled = x.ok(200, x.call(x.provider, "DELETE", "/v1/orders/" + id));
  INFO(json::serialize(cancelled));
  CHECK(cancelled.at("status") == "cancelled");
  CHECK(cancelled.at("free").as_array().empty());
  CHECK(hours(cancelled.at("lapsed_gpu_hours")) >= 12.0);
  CHECK(x.ok(200, x.call(x.provider, "GET", "/v1/orders/" + id)).at("free").as_array().empty());
}

TEST_CASE("a provider has at most --max-pools-per-provider pools not retired") {
  Exchange x({"--max-pools-per-provider", "2"});
  const std::string first = str(x.pool(x.provider).at("id"));
  x.pool(x.provider);
  auto third = x.call(x.provider, "POST", "/v1/pools",
                      {{"market", "H100-SXM-80G"}, {"region", "IS"}, {"tier", "bare_metal"}, {"gpus_per_node", 8},
                       {"nodes", 1}, {"pue", "1.1"}, {"renewable_pct", 90}, {"carbon_g_per_kwh", 50}});
  INFO(third.body);
  CHECK(third.status == 422);
  CHECK(third.json().at("error").at("code") == "pool_limit");
  x.pool(x.other);  // another provider's count is its own
  x.ok(200, x.call(x.provider, "DELETE", "/v1/pools/" + first));
  x.pool(x.provider);  // a retired pool leaves room
}
