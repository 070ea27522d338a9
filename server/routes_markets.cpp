// Public market reference data: the GPU models traded, with their performance factor and tick.
#include <boost/json.hpp>

#include "server/decimal.hpp"
#include "server/routes.hpp"

namespace gpuex {

using http::bhttp::verb;

namespace {
constexpr const char* kSelectMarkets = R"sql(
SELECT id, name, vendor, memory_gb, perf_factor::text, tick_size_micros, halted
FROM markets ORDER BY id)sql";
}  // namespace

void add_market_routes(http::Router& router, Services& services) {
  router.add(verb::get, "/v1/markets", services.gate.open([&services](http::RequestContext&, http::Respond respond) {
    services.queries.submit(
        [respond](store::PgConnection& db) {
          auto rows = db.exec(kSelectMarkets);
          boost::json::array markets;
          for (int r = 0; r < rows.rows(); ++r) {
            markets.push_back(boost::json::object{
                {"id", rows.text(r, 0)},
                {"name", rows.text(r, 1)},
                {"vendor", rows.text(r, 2)},
                {"memory_gb", rows.integer(r, 3)},
                {"perf_factor", rows.text(r, 4)},
                {"tick_size", format_price(rows.integer(r, 5))},
                {"halted", rows.text(r, 6) == "t"},
            });
          }
          respond(http::json_response(http::Status::ok, {{"markets", std::move(markets)}}));
        },
        [respond](const std::string&) {
          respond(http::error_response(http::Status::service_unavailable, "store_unavailable",
                                       "the market list cannot be read: PostgreSQL does not answer"));
        });
  }));
}

}  // namespace gpuex
