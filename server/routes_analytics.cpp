// Public price-discovery data (DESIGN.md §5, API.md): trade prints, candles, the forward curve, 24 h
// stats and the daily index. Read from the rollups (server/analytics/rollups.*) on the QueryPool,
// never from the engine; best bid and ask come from the published book views. Every price also comes
// as `*_normalized`: USD per H100-equivalent GPU-hour (the price ÷ the market's perf_factor).
#include <boost/json.hpp>

#include <charconv>

#include "matching/money.hpp"
#include "server/analytics/candle_json.hpp"
#include "server/analytics/queries.hpp"
#include "server/analytics/rollups.hpp"
#include "server/decimal.hpp"
#include "server/rfc3339.hpp"
#include "server/routes.hpp"
#include "server/wire.hpp"

namespace gpuex {

using http::bhttp::verb;
namespace json = boost::json;
using matching::Int128;

using namespace analytics::sql;

namespace {

constexpr std::int64_t kDay = 86400;
constexpr std::int64_t kMaxCandles = 5000;   // per request
constexpr std::int64_t kMaxIndexDays = 1000;  // per request
constexpr std::size_t kMaxTenors = 120;        // forward curve: ten years of months
constexpr std::int64_t kFarFuture = 253402300799;  // 9999-12-31T23:59:59Z

constexpr const char* kSelectTrades = R"sql(
SELECT print::text, at, id FROM trades
WHERE market = $1 AND at >= $2 AND at < $3 AND (at, id) < ($4::bigint, $5::bigint)
ORDER BY at DESC, id DESC LIMIT $6)sql";
std::string num(std::int64_t v) { return std::to_string(v); }

std::int64_t floor_to(std::int64_t t, std::int64_t step) {
  std::int64_t r = t % step;
  return r < 0 ? t - r - step : t - r;
}

http::Response bad(std::string_view field, std::string_view message) {
  return http::error_response(http::Status::bad_request, "invalid_field", message, field);
}

// An optional time parameter: RFC 3339, or a UTC date "2027-01-31" (its midnight).
std::variant<std::optional<std::int64_t>, http::Response> time_param(const http::RequestContext& ctx,
                                                                     std::string_view name) {
  auto text = query_param(ctx, name);
  if (!text) return std::optional<std::int64_t>{};
  auto t = parse_rfc3339(text->size() == 10 ? *text + "T00:00:00Z" : *text);
  if (!t) return bad(name, std::string(name) + " must be an RFC 3339 time (2027-01-01T00:00:00Z) or a date (2027-01-01), from 1970 to 9999");
  return std::optional<std::int64_t>{*t};
}

// `bucket`: spot (default) or a month such as 2027-01.
std::variant<std::string, http::Response> bucket_param(const http::RequestContext& ctx) {
  auto name = query_param(ctx, "bucket").value_or("spot");
  bool ok = wire::parse_bucket(name).has_value();
  if (!ok) return bad("bucket", "bucket must be spot or a month such as 2027-01");
  return name;
}

bool wants_csv(const http::RequestContext& ctx) {
  auto it = ctx.request.find(http::bhttp::field::accept);
  return it != ctx.request.end() && it->value().find("text/csv") != boost::beast::string_view::npos;
}

http::Response csv_response(std::string body) {
  return http::text_response(http::Status::ok, std::move(body), "text/csv; charset=utf-8");
}

using analytics::ExactPrice;
using analytics::gpu_hours;
using analytics::normalized;
using analytics::numeric;
using analytics::perf_e6;
using analytics::put_price;
using analytics::ratio;

// Prices: micro-dollars per GPU-hour -> "2.0500".
std::string price(std::int64_t micros) { return format_price(micros); }

std::string as_string(const json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  if (v.is_bool()) return v.as_bool() ? "true" : "false";
  return json::serialize(v);
}

void store_error(const http::Respond& respond) { respond(store_unavailable_response()); }

// The (at, id) of a trades cursor "AT_ID".
std::optional<std::pair<std::int64_t, std::int64_t>> parse_trade_cursor(std::string_view s) {
  auto sep = s.find('_');
  if (sep == std::string_view::npos) return std::nullopt;
  std::int64_t at = 0, id = 0;
  auto a = std::from_chars(s.data(), s.data() + sep, at);
  auto b = std::from_chars(s.data() + sep + 1, s.data() + s.size(), id);
  if (a.ec != std::errc() || a.ptr != s.data() + sep || b.ec != std::errc() || b.ptr != s.data() + s.size() ||
      at < 0 || id < 1) {
    return std::nullopt;
  }
  return std::pair{at, id};
}

}  // namespace

void add_analytics_routes(http::Router& router, Services& services) {
  // Trade prints, newest first, paged by an opaque cursor.
  router.add(verb::get, "/v1/markets/{m}/trades", services.gate.open([&services](http::RequestContext& ctx,
                                                                               http::Respond respond) {
    std::string market = ctx.path_params.at("m");
    if (!services.markets.count(market)) return respond(not_found("market"));
    std::int64_t limit = 100;
    if (auto l = query_param(ctx, "limit")) {
      auto [ptr, ec] = std::from_chars(l->data(), l->data() + l->size(), limit);
      if (ec != std::errc() || ptr != l->data() + l->size() || limit < 1 || limit > 1000) {
        return respond(bad("limit", "limit must be 1 to 1000"));
      }
    }
    std::pair<std::int64_t, std::int64_t> before{kFarFuture + 1, 0};
    if (auto c = query_param(ctx, "cursor")) {
      auto parsed = parse_trade_cursor(*c);
      if (!parsed) return respond(bad("cursor", "cursor is not one this server gave"));
      before = *parsed;
    }
    auto from = time_param(ctx, "from");
    if (auto* r = std::get_if<http::Response>(&from)) return respond(std::move(*r));
    auto to = time_param(ctx, "to");
    if (auto* r = std::get_if<http::Response>(&to)) return respond(std::move(*r));
    std::int64_t lo = std::get<0>(from).value_or(0), hi = std::get<0>(to).value_or(kFarFuture + 1);
    if (lo >= hi) return respond(bad("from", "from must be before to"));
    bool csv = wants_csv(ctx);
    services.queries.submit(
        [=](store::PgConnection& db) {
          auto perf = perf_e6(db, market);
          auto rows = db.exec(kSelectTrades, {market, num(lo), num(hi), num(before.first), num(before.second),
                                              num(limit + 1)});
          json::array prints;
          for (int i = 0; i < rows.rows() && i < limit; ++i) {
            auto print = json::parse(rows.text(i, 0)).as_object();
            for (const char* key : {"price", "list_price"}) {
              auto micros = parse_fixed(print.at(key).as_string(), 6);
              print[std::string(key) + "_normalized"] = micros ? json::value(normalized(*micros, perf)) : json::value(nullptr);
            }
            prints.push_back(std::move(print));
          }
          std::optional<std::string> next;
          if (rows.rows() > limit) {
            int last = static_cast<int>(limit) - 1;
            next = std::string(rows.text(last, 1)) + "_" + std::string(rows.text(last, 2));
          }
          if (csv) {
            static constexpr const char* kColumns[] = {
                "trade_id", "time",     "bucket", "price",  "price_normalized", "list_price", "list_price_normalized",
                "green_discount_bps", "quantity", "start", "end", "gpu_hours", "tier", "region", "green_tier",
                "preemption"};
            std::string out;
            for (const char* c : kColumns) out += std::string(out.empty() ? "" : ",") + c;
            out += "\n";
            for (const auto& p : prints) {
              std::string line;
              for (const char* c : kColumns) line += std::string(line.empty() ? "" : ",") + as_string(p.as_object().at(c));
              out += line + "\n";
            }
            auto res = csv_response(std::move(out));
            if (next) res.set("Next-Cursor", *next);
            return respond(std::move(res));
          }
          respond(http::json_response(http::Status::ok,
                                      {{"market", market},
                                       {"trades", std::move(prints)},
                                       {"next_cursor", next ? json::value(*next) : json::value(nullptr)}}));
        },
        [respond](const std::string&) { store_error(respond); });
  }));

  // Candles of one market, bucket and interval; periods without trades have no candle.
  router.add(verb::get, "/v1/markets/{m}/candles", services.gate.open([&services](http::RequestContext& ctx,
                                                                                http::Respond respond) {
    std::string market = ctx.path_params.at("m");
    if (!services.markets.count(market)) return respond(not_found("market"));
    auto interval_name = query_param(ctx, "interval").value_or("1h");
    auto interval = analytics::parse_interval(interval_name);
    if (!interval) return respond(bad("interval", "interval must be 1m, 5m, 1h or 1d"));
    auto bucket = bucket_param(ctx);
    if (auto* r = std::get_if<http::Response>(&bucket)) return respond(std::move(*r));
    auto from = time_param(ctx, "from");
    if (auto* r = std::get_if<http::Response>(&from)) return respond(std::move(*r));
    auto to = time_param(ctx, "to");
    if (auto* r = std::get_if<http::Response>(&to)) return respond(std::move(*r));
    std::int64_t hi = std::get<0>(to).value_or(services.runner.server_time() + 1);
    std::int64_t lo = floor_to(std::get<0>(from).value_or(hi - 100 * *interval), *interval);
    if (lo >= hi) return respond(bad("from", "from must be before to"));
    if ((hi - lo + *interval - 1) / *interval > kMaxCandles) {  // periods started in [lo, hi)
      return respond(bad("from", "at most 5000 candles per request: narrow from and to"));
    }
    bool csv = wants_csv(ctx);
    std::string bucket_name = std::get<std::string>(bucket);
    std::int64_t step = *interval;
    services.queries.submit(
        [=](store::PgConnection& db) {
          auto perf = perf_e6(db, market);
          auto rows = db.exec(kSelectCandles, {market, bucket_name, num(step), num(lo), num(hi)});
          json::array candles;
          std::string out = "start,open,high,low,close,vwap,volume_gpu_hours,trades,open_normalized,high_normalized,"
                            "low_normalized,close_normalized,vwap_normalized\n";
          for (int i = 0; i < rows.rows(); ++i) {
            auto k = analytics::candle_row(rows, i);
            if (csv) {
              auto vwap = k.vwap();
              out += format_rfc3339(k.start) + "," + price(k.open) + "," + price(k.high) + "," + price(k.low) + "," +
                     price(k.close) + "," + price(vwap.micros()) + "," + gpu_hours(k.gpu_seconds) + "," +
                     std::to_string(k.trades) + "," + normalized(k.open, perf) + "," + normalized(k.high, perf) + "," +
                     normalized(k.low, perf) + "," + normalized(k.close, perf) + "," + normalized(vwap, perf) + "\n";
              continue;
            }
            candles.push_back(analytics::candle_json(k, perf));
          }
          if (csv) return respond(csv_response(std::move(out)));
          respond(http::json_response(http::Status::ok, {{"market", market},
                                                         {"bucket", bucket_name},
                                                         {"interval", interval_name},
                                                         {"from", format_rfc3339(lo)},
                                                         {"to", format_rfc3339(hi)},
                                                         {"candles", std::move(candles)}}));
        },
        [respond](const std::string&) { store_error(respond); });
  }));

  // Per monthly tenor from the current month on: last price, 7-day VWAP, best bid and ask of the
  // published book, open interest.
  router.add(verb::get, "/v1/markets/{m}/forward-curve", services.gate.open([&services](http::RequestContext& ctx,
                                                                                      http::Respond respond) {
    std::string market = ctx.path_params.at("m");
    if (!services.markets.count(market)) return respond(not_found("market"));
    std::int64_t now = services.runner.server_time();
    services.queries.submit(
        [&services, market, now, respond](store::PgConnection& db) {
          auto perf = perf_e6(db, market);
          std::string month = format_rfc3339(now).substr(0, 7);
          std::int64_t week_from = floor_to(now, kDay) - 6 * kDay;
          struct Tenor {
            std::optional<std::int64_t> last, last_at, bid, ask;
            std::optional<ExactPrice> vwap;
            Int128 week_gs = 0, open_interest = 0;
            std::int64_t week_trades = 0;
          };
          std::map<std::string, Tenor> tenors;
          auto last = db.exec(kSelectLast, {market, month});
          for (int i = 0; i < last.rows(); ++i) {
            auto& t = tenors[std::string(last.text(i, 0))];
            t.last = last.integer(i, 1);
            t.last_at = last.integer(i, 2);
          }
          auto week = db.exec(kSelectWeek, {market, month, num(week_from)});
          for (int i = 0; i < week.rows(); ++i) {
            auto& t = tenors[std::string(week.text(i, 0))];
            t.week_gs = numeric(week, i, 1);
            if (t.week_gs > 0) t.vwap = ExactPrice(numeric(week, i, 2), t.week_gs);
            t.week_trades = week.integer(i, 3);
          }
          auto oi = db.exec(kSelectOpenInterest, {market, month});
          for (int i = 0; i < oi.rows(); ++i) tenors[std::string(oi.text(i, 0))].open_interest = numeric(oi, i, 1);
          matching::MarketId id{market};
          for (auto bucket : services.views.buckets(id)) {
            if (bucket.is_spot()) continue;
            std::string name = matching::to_string(bucket);
            if (name < month) continue;
            auto depth = services.views.get(id, bucket, 1);
            bool resting = !depth.bids.empty() || !depth.asks.empty() || depth.constrained_bids.orders > 0;
            if (!resting && !tenors.count(name)) continue;
            auto& t = tenors[name];
            if (!depth.bids.empty()) t.bid = depth.bids.front().price.value;
            if (!depth.asks.empty()) t.ask = depth.asks.front().price.value;
          }
          json::array curve;
          for (const auto& [name, t] : tenors) {
            if (curve.size() == kMaxTenors) break;  // the nearest ones (names sort by month)
            json::object o{{"tenor", name}};
            put_price(o, "last", t.last, perf);
            o["last_time"] = t.last_at ? json::value(format_rfc3339(*t.last_at)) : json::value(nullptr);
            put_price(o, "vwap_7d", t.vwap, perf);
            o["volume_7d_gpu_hours"] = gpu_hours(t.week_gs);
            o["trades_7d"] = t.week_trades;
            put_price(o, "best_bid", t.bid, perf);
            put_price(o, "best_ask", t.ask, perf);
            o["open_interest_gpu_hours"] = gpu_hours(t.open_interest);
            curve.push_back(std::move(o));
          }
          respond(http::json_response(http::Status::ok,
                                      {{"market", market}, {"as_of", format_rfc3339(now)}, {"tenors", std::move(curve)}}));
        },
        [respond](const std::string&) { store_error(respond); });
  }));

  // The last 24 h, all buckets: the 1440 one-minute candles ending with the current minute.
  router.add(verb::get, "/v1/markets/{m}/stats", services.gate.open([&services](http::RequestContext& ctx,
                                                                              http::Respond respond) {
    std::string market = ctx.path_params.at("m");
    if (!services.markets.count(market)) return respond(not_found("market"));
    std::int64_t now = services.runner.server_time();
    std::int64_t from = floor_to(now, 60) + 60 - kDay;
    services.queries.submit(
        [market, now, from, respond](store::PgConnection& db) {
          auto perf = perf_e6(db, market);
          std::int64_t first_hour = floor_to(from + 3599, 3600), last_hour = floor_to(now, 3600);
          auto r = db.exec(kSelectStats, {market, num(from), num(now), num(first_hour), num(last_hour)});
          Int128 gs = numeric(r, 0, 1), green = numeric(r, 0, 5);
          std::optional<ExactPrice> vwap;
          std::optional<std::int64_t> high, low;
          if (gs > 0) vwap = ExactPrice(numeric(r, 0, 2), gs);
          if (!r.is_null(0, 3)) high = r.integer(0, 3), low = r.integer(0, 4);
          json::object o{{"market", market}, {"from", format_rfc3339(from)}, {"to", format_rfc3339(now)},
                         {"trades", r.integer(0, 0)}, {"volume_gpu_hours", gpu_hours(gs)}};
          put_price(o, "vwap", vwap, perf);
          put_price(o, "high", high, perf);
          put_price(o, "low", low, perf);
          o["green_volume_gpu_hours"] = gpu_hours(green);
          // The share of volume on green pools, a fraction with 6 decimals.
          o["green_share"] = gs > 0 ? json::value(format_fixed(ratio(green * 1'000'000, gs), 6, 6)) : json::value(nullptr);
          o["green_discount_usd"] = format_usd(ratio(numeric(r, 0, 6), 3600));
          respond(http::json_response(http::Status::ok, o));
        },
        [respond](const std::string&) { store_error(respond); });
  }));

  // The daily index: per UTC day, the volume-weighted mean of the day's spot trades after trimming
  // 5 % of the volume from each end of the price-sorted trades.
  router.add(verb::get, "/v1/index/{m}", services.gate.open([&services](http::RequestContext& ctx,
                                                                      http::Respond respond) {
    std::string market = ctx.path_params.at("m");
    if (!services.markets.count(market)) return respond(not_found("market"));
    auto from = time_param(ctx, "from");
    if (auto* r = std::get_if<http::Response>(&from)) return respond(std::move(*r));
    auto to = time_param(ctx, "to");
    if (auto* r = std::get_if<http::Response>(&to)) return respond(std::move(*r));
    std::int64_t now = services.runner.server_time();
    std::int64_t hi = std::get<0>(to).value_or(now + 1);
    std::int64_t lo = floor_to(std::get<0>(from).value_or(floor_to(hi - 1, kDay) - 29 * kDay), kDay);
    if (lo >= hi) return respond(bad("from", "from must be before to"));
    if ((hi - lo + kDay - 1) / kDay > kMaxIndexDays) {  // days started in [lo, hi)
      return respond(bad("from", "at most 1000 days per request: narrow from and to"));
    }
    bool csv = wants_csv(ctx);
    services.queries.submit(
        [=](store::PgConnection& db) {
          auto perf = perf_e6(db, market);
          auto rows = db.exec(kSelectIndex, {market, num(lo), num(hi)});
          json::array days;
          std::string out = "day,value,value_normalized,volume_gpu_hours,trades,final\n";
          for (int i = 0; i < rows.rows(); ++i) {
            std::int64_t day = rows.integer(i, 0);
            Int128 gs = numeric(rows, i, 1);
            ExactPrice value(numeric(rows, i, 2), 18 * gs);
            std::string date = format_rfc3339(day).substr(0, 10);
            bool final = day + kDay <= now;  // later trades cannot change a day that is over
            if (csv) {
              out += date + "," + price(value.micros()) + "," + normalized(value, perf) + "," + gpu_hours(gs) + "," +
                     std::string(rows.text(i, 3)) + "," + (final ? "true" : "false") + "\n";
              continue;
            }
            json::object d{{"day", date}};
            put_price(d, "value", value, perf);
            d["volume_gpu_hours"] = gpu_hours(gs);
            d["trades"] = rows.integer(i, 3);
            d["final"] = final;
            days.push_back(std::move(d));
          }
          if (csv) return respond(csv_response(std::move(out)));
          respond(http::json_response(http::Status::ok, {{"market", market},
                                                         {"from", format_rfc3339(lo)},
                                                         {"to", format_rfc3339(hi)},
                                                         {"index", std::move(days)}}));
        },
        [respond](const std::string&) { store_error(respond); });
  }));
}

}  // namespace gpuex
