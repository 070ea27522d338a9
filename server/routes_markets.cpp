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
    matching::Bucket bucket = matching::Bucket::spot();
    auto name = query_param(ctx, "bucket").value_or("spot");
    if (name != "spot") {
      int y = 0, m = 0;
      bool ok = name.size() == 7 && name[4] == '-' &&
                std::from_chars(name.data(), name.data() + 4, y).ptr == name.data() + 4 &&
                std::from_chars(name.data() + 5, name.data() + 7, m).ptr == name.data() + 7 && y >= 1970 && m >= 1 && m <= 12;
      if (!ok) {
        return respond(http::error_response(http::Status::bad_request, "invalid_field",
                                            "bucket must be spot or a month such as 2027-01", "bucket"));
      }
      bucket = matching::Bucket{y * 100 + m};
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
    auto view = services.views.get(matching::MarketId{market}, bucket, depth);
    auto levels = [](const std::vector<matching::Level>& side) {
      boost::json::array out;
      for (const auto& l : side) out.push_back(boost::json::array{boost::json::value(wire::price_string(l.price)),
                                                                  boost::json::value(l.quantity.value)});
      return out;
    };
    respond(http::json_response(
        http::Status::ok,
        {{"market", market},
         {"bucket", matching::to_string(bucket)},
         {"sequence", view.sequence},
         {"bids", levels(view.bids)},
         {"asks", levels(view.asks)},
         {"constrained_bids", {{"orders", view.constrained_bids.orders}, {"gpus", view.constrained_bids.gpus.value}}}}));
  }));
}

}  // namespace gpuex
