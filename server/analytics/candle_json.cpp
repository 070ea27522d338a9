// See candle_json.hpp.
#include "server/analytics/candle_json.hpp"

#include "server/analytics/rollups.hpp"
#include "server/decimal.hpp"
#include "server/rfc3339.hpp"

namespace gpuex::analytics {

using matching::Int128;
namespace json = boost::json;

namespace {
constexpr const char* kPerfFactor = "SELECT (perf_factor * 1000000)::bigint FROM markets WHERE id = $1";
}

std::int64_t perf_e6(store::PgConnection& db, const std::string& market) {
  auto r = db.exec(kPerfFactor, {market});
  if (r.rows() != 1) throw store::StoreError("market " + market + " has no perf_factor");
  return r.integer(0, 0);
}

Int128 numeric(const store::PgResult& rows, int r, int c) {
  auto v = parse_int128(rows.text(r, c));
  if (!v) throw store::StoreError("not an integer: " + std::string(rows.text(r, c)));
  return *v;
}

std::string normalized(ExactPrice price, std::int64_t perf) {
  return format_price(ratio(price.num * 1'000'000, price.den * perf));
}
std::int64_t ratio(Int128 num, Int128 den) { return static_cast<std::int64_t>(matching::div_half_even(num, den)); }
std::string gpu_hours(Int128 gpu_seconds) { return format_fixed(ratio(gpu_seconds * 1'000'000, 3600), 6, 1); }

void put_price(json::object& o, std::string_view key, std::optional<ExactPrice> price, std::int64_t perf) {
  std::string norm = std::string(key) + "_normalized";
  if (price) {
    o[key] = format_price(price->micros());
    o[norm] = normalized(*price, perf);
  } else {
    o[key] = nullptr;
    o[norm] = nullptr;
  }
}

CandleRow candle_row(const store::PgResult& rows, int r) {
  CandleRow k;
  k.start = rows.integer(r, 0);
  k.open = rows.integer(r, 1);
  k.high = rows.integer(r, 2);
  k.low = rows.integer(r, 3);
  k.close = rows.integer(r, 4);
  k.trades = rows.integer(r, 5);
  k.gpu_seconds = numeric(rows, r, 6);
  k.notional = numeric(rows, r, 7);
  return k;
}

json::object candle_json(const CandleRow& k, std::int64_t perf) {
  json::object o{{"start", format_rfc3339(k.start)}};
  put_price(o, "open", k.open, perf);
  put_price(o, "high", k.high, perf);
  put_price(o, "low", k.low, perf);
  put_price(o, "close", k.close, perf);
  put_price(o, "vwap", k.vwap(), perf);
  o["volume_gpu_hours"] = gpu_hours(k.gpu_seconds);
  o["trades"] = k.trades;
  return o;
}

}  // namespace gpuex::analytics
