// The wire form of orders and pools: what API.md promises in, exact integers inside.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "server/wire.hpp"

using namespace gpuex;
using namespace gpuex::matching;

namespace {
struct Read {
  OrderRequest order;
  std::optional<http::Response> error;
};
Read read_order(const char* text) {
  auto body = boost::json::parse(text).as_object();
  JsonFields fields(body);
  Read r{wire::read_order_request(fields), std::nullopt};
  r.error = fields.finish();
  return r;
}
std::string field_of(const http::Response& res) {
  return std::string(boost::json::parse(res.body()).at("error").at("field").as_string());
}
std::string code_of(const http::Response& res) {
  return std::string(boost::json::parse(res.body()).at("error").at("code").as_string());
}
}  // namespace

TEST_CASE("a constrained forward bid reads into exact integers") {
  auto r = read_order(R"({"side": "buy", "market": "H100-SXM-80G", "price": "2.0500", "quantity": 16,
      "start": "2027-01-01T00:00:00Z", "end": "2027-02-01T00:00:00Z", "regions": ["DE", "FR"],
      "tiers": ["bare_metal"], "min_fabric": "infiniband", "min_sla_pct": "99.9", "max_pue": "1.2",
      "min_renewable_pct": 80, "max_carbon_g_per_kwh": 99.5, "min_chunk": 8, "client_order_id": "run-42"})");
  REQUIRE_FALSE(r.error);
  const auto& o = r.order;
  CHECK(o.side == Side::buy);
  CHECK(o.price == Price(2'050'000));
  CHECK(o.quantity == Qty(16));
  CHECK(o.start == Seconds(1798761600));
  CHECK(o.end == Seconds(1798761600 + 31 * 86400));
  CHECK(o.constraints.regions == std::vector<std::string>{"DE", "FR"});
  CHECK(o.constraints.min_fabric == Fabric::infiniband);
  CHECK(o.constraints.min_sla_pct_x1000 == 99'900);
  CHECK(o.constraints.max_pue_x1000 == 1'200);
  CHECK(o.constraints.min_renewable_pct_x100 == 8'000);
  CHECK(o.constraints.max_carbon_g_per_kwh_x100 == 9'950);
  CHECK(o.min_chunk == Qty(8));
  CHECK(o.client_order_id == "run-42");
}

TEST_CASE("bad order bodies name the field at fault") {
  struct Case {
    const char* body;
    const char* code;
    const char* field;
  };
  for (const Case& c : {
           Case{R"({"side": "buy", "market": "M", "price": "2.05", "quantity": 1})", "missing_field", "duration"},
           Case{R"({"side": "buy", "market": "M", "price": 2.05, "quantity": 1, "duration": 3600})", "invalid_field", "price"},
           Case{R"({"side": "buy", "market": "M", "price": "-1", "quantity": 1, "duration": 3600})", "invalid_field", "price"},
           Case{R"({"side": "buy", "market": "M", "price": "1e3", "quantity": 1, "duration": 3600})", "invalid_field", "price"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 0, "duration": 3600})", "invalid_field", "quantity"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1.5, "duration": 3600})", "invalid_field", "quantity"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 99999999999999999999, "duration": 3600})", "invalid_field", "quantity"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "start": "2027-01-02T00:00:00Z",
                    "end": "2027-01-01T00:00:00Z"})", "invalid_field", "end"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "start": "2027-01-01T00:00:00Z"})", "missing_field", "end"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "duration": 3600, "single_pool": true})", "invalid_field", "single_pool"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "duration": 3600, "time_in_force": "gtd"})", "missing_field", "expire_at"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "duration": 3600, "time_in_force": "ioc", "post_only": true})", "invalid_field", "post_only"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "duration": 3600, "regions": ["germany"]})", "invalid_field", "regions"},
           Case{R"({"side": "buy", "market": "M", "price": "1", "quantity": 1, "duration": 3600, "colour": "red"})", "unknown_field", "colour"},
           Case{R"({"side": "sell", "pool_id": "7", "price": "1", "quantity": 1, "start": "2027-01-01T00:00:00Z",
                    "end": "2027-01-02T00:00:00Z", "regions": ["DE"]})", "unknown_field", "regions"},
           Case{R"({"side": "sell", "pool_id": "x7", "price": "1", "quantity": 1, "start": "2027-01-01T00:00:00Z",
                    "end": "2027-01-02T00:00:00Z"})", "invalid_field", "pool_id"},
           Case{R"({"side": "hold", "market": "M", "price": "1", "quantity": 1, "duration": 3600})", "invalid_field", "side"},
           Case{R"({"side": "buy", "market": "X1234567890123456789012345678901234567890", "price": "1", "quantity": 1,
                    "duration": 3600})", "invalid_field", "market"},
       }) {
    INFO(c.body);
    auto r = read_order(c.body);
    REQUIRE(r.error);
    CHECK(code_of(*r.error) == c.code);
    CHECK(field_of(*r.error) == c.field);
  }
}

TEST_CASE("orders render with API.md's fields") {
  Order o;
  o.id = OrderId(12);
  o.request.side = Side::sell;
  o.request.pool = PoolId(3);
  o.request.price = Price(2'500'000);
  o.request.quantity = Qty(8);
  o.market = MarketId{"H100-SXM-80G"};
  o.effective_price = Price(2'000'000);
  o.green_discount_bps = 2000;
  o.window_start = Seconds(1798761600);
  o.window_end = Seconds(1798761600 + 7200);
  o.filled_gpu_seconds = 8 * 1800;
  o.free_gpu_seconds = 8 * 5400;
  o.free = Steps(Seconds(1798761600 + 1800), Seconds(1798761600 + 7200), 8);
  auto j = wire::order_json(o);
  CHECK(j.at("id").as_string() == "12");
  CHECK(j.at("price").as_string() == "2.5000");
  CHECK(j.at("effective_price").as_string() == "2.0000");
  CHECK(j.at("filled_gpu_hours").as_string() == "4.0");
  CHECK(j.at("remaining_gpu_hours").as_string() == "12.0");
  CHECK(j.at("free") == boost::json::parse(R"([["2027-01-01T00:30:00Z", "2027-01-01T02:00:00Z", 8]])"));
  CHECK(j.at("client_order_id").is_null());
}
