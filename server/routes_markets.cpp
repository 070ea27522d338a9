// Public market reference data: the GPU models traded, with their performance factor and tick.
#include <boost/json.hpp>

#include <charconv>

#include "server/decimal.hpp"
#include "server/routes.hpp"
#include "server/wire.hpp"

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

  // L2 depth from the published (committed) view.
  router.add(verb::get, "/v1/markets/{m}/book", services.gate.open([&services](http::RequestContext& ctx,
                                                                             http::Respond respond) {
    const auto& market = ctx.path_params.at("m");
    if (!services.markets.count(market)) return respond(not_found("market"));
    auto bucket = wire::parse_bucket(query_param(ctx, "bucket").value_or("spot"));
    if (!bucket) {
      return respond(http::error_response(http::Status::bad_request, "invalid_field",
                                          "bucket must be spot or a month such as 2027-01", "bucket"));
    }
    std::size_t depth = 20;
    if (auto d = query_param(ctx, "depth")) {
      long v = 0;
      auto [ptr, ec] = std::from_chars(d->data(), d->data() + d->size(), v);
      if (ec != std::errc() || ptr != d->data() + d->size() || v < 1) {
        return respond(http::error_response(http::Status::bad_request, "invalid_field", "depth must be a positive number", "depth"));
      }
      depth = static_cast<std::size_t>(std::min(v, 1000L));  // more is clamped (API.md)
    }
    auto view = services.views.get(matching::MarketId{market}, *bucket, depth);
    respond(http::json_response(http::Status::ok, {{"market", market},
                                                   {"bucket", matching::to_string(*bucket)},
                                                   {"sequence", view.sequence},
                                                   {"bids", wire::levels_json(view.bids)},
                                                   {"asks", wire::levels_json(view.asks)},
                                                   {"constrained_bids", wire::constrained_json(view.constrained_bids)}}));
  }));
}

}  // namespace gpuex
