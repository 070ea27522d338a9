// See rollups.hpp.
#include "server/analytics/rollups.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace gpuex::analytics {

using namespace matching;

namespace {

constexpr store::Statement kUpsertCandles{"rollup_candles", R"sql(
INSERT INTO candles AS c (market, bucket, interval_s, period_start, open_micros, open_at, open_trade, high_micros,
                          low_micros, close_micros, close_at, close_trade, trades, gpu_seconds, notional,
                          green_gpu_seconds, discount)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
                     $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[],
                     $14::numeric[], $15::numeric[], $16::numeric[], $17::numeric[])
ON CONFLICT (market, bucket, interval_s, period_start) DO UPDATE SET
  open_micros = CASE WHEN (excluded.open_at, excluded.open_trade) < (c.open_at, c.open_trade)
                     THEN excluded.open_micros ELSE c.open_micros END,
  open_trade = CASE WHEN (excluded.open_at, excluded.open_trade) < (c.open_at, c.open_trade)
                    THEN excluded.open_trade ELSE c.open_trade END,
  open_at = least(excluded.open_at, c.open_at),
  high_micros = greatest(excluded.high_micros, c.high_micros),
  low_micros = least(excluded.low_micros, c.low_micros),
  close_micros = CASE WHEN (excluded.close_at, excluded.close_trade) > (c.close_at, c.close_trade)
                      THEN excluded.close_micros ELSE c.close_micros END,
  close_trade = CASE WHEN (excluded.close_at, excluded.close_trade) > (c.close_at, c.close_trade)
                     THEN excluded.close_trade ELSE c.close_trade END,
  close_at = greatest(excluded.close_at, c.close_at),
  trades = c.trades + excluded.trades,
  gpu_seconds = c.gpu_seconds + excluded.gpu_seconds,
  notional = c.notional + excluded.notional,
  green_gpu_seconds = c.green_gpu_seconds + excluded.green_gpu_seconds,
  discount = c.discount + excluded.discount)sql"};

constexpr store::Statement kUpsertLast{"rollup_last", R"sql(
INSERT INTO last_trades AS l (market, bucket, at, trade_id, price_micros)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[])
ON CONFLICT (market, bucket) DO UPDATE SET at = excluded.at, trade_id = excluded.trade_id,
                                           price_micros = excluded.price_micros
WHERE (excluded.at, excluded.trade_id) > (l.at, l.trade_id))sql"};

constexpr store::Statement kUpsertIndexPrices{"rollup_index_prices", R"sql(
INSERT INTO index_prices AS p (market, day, price_micros, gpu_seconds, trades)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::numeric[], $5::bigint[])
ON CONFLICT (market, day, price_micros) DO UPDATE SET gpu_seconds = p.gpu_seconds + excluded.gpu_seconds,
                                                      trades = p.trades + excluded.trades)sql"};

// Each touched (market, day) of the daily index, finished in memory (Rollups::Ladder): its volume,
// Σ price × volume, trimmed sum ×20 and trades as they stand after the transaction.
constexpr store::Statement kSetDailyIndex{"rollup_daily_index", R"sql(
INSERT INTO daily_index AS d (market, day, gpu_seconds, notional, trimmed_x20, trades)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::numeric[], $4::numeric[], $5::numeric[], $6::bigint[])
ON CONFLICT (market, day) DO UPDATE SET gpu_seconds = excluded.gpu_seconds, notional = excluded.notional,
                                        trimmed_x20 = excluded.trimmed_x20, trades = excluded.trades)sql"};
constexpr const char* kLoadLadders = R"sql(
SELECT market, day, price_micros, gpu_seconds::text, trades FROM index_prices
WHERE (market, day) IN (SELECT * FROM unnest($1::text[], $2::bigint[])))sql";

// Each lease's contribution to open interest is kept while it is reserved; a new state replaces it,
// so the aggregate changes by exactly the difference.
constexpr store::Statement kLeases{"rollup_leases", R"sql(
WITH input AS (
  SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::numeric[], $5::boolean[])
    AS i (id, market, bucket, gpu_seconds, reserved)),
old AS (SELECT r.id, r.market, r.bucket, r.gpu_seconds FROM reserved_leases r JOIN input i ON i.id = r.id),
gone AS (DELETE FROM reserved_leases r USING input i WHERE r.id = i.id AND NOT i.reserved),
kept AS (INSERT INTO reserved_leases (id, market, bucket, gpu_seconds)
         SELECT id, market, bucket, gpu_seconds FROM input WHERE reserved
         ON CONFLICT (id) DO UPDATE SET gpu_seconds = excluded.gpu_seconds),
delta AS (SELECT market, bucket, sum(g) AS g
          FROM (SELECT market, bucket, gpu_seconds AS g FROM input WHERE reserved
                UNION ALL SELECT market, bucket, -gpu_seconds FROM old) x
          GROUP BY market, bucket)
INSERT INTO open_interest AS o (market, bucket, gpu_seconds)
SELECT market, bucket, g FROM delta WHERE g <> 0
ON CONFLICT (market, bucket) DO UPDATE SET gpu_seconds = o.gpu_seconds + excluded.gpu_seconds)sql"};

constexpr store::Statement kStatements[] = {kUpsertCandles, kUpsertLast, kUpsertIndexPrices, kSetDailyIndex, kLeases};

struct Candle {
  std::int64_t open = 0, open_at = 0, open_trade = 0;
  std::int64_t high = 0, low = 0;
  std::int64_t close = 0, close_at = 0, close_trade = 0;
  std::int64_t trades = 0;
  Int128 gpu_seconds = 0, notional = 0, green_gpu_seconds = 0, discount = 0;

  void add(const Trade& t) {
    auto at = t.time.value, id = t.id.value, p = t.price.value;
    Int128 gs = t.gpu_seconds();
    if (trades == 0 || std::tie(at, id) < std::tie(open_at, open_trade)) open = p, open_at = at, open_trade = id;
    if (trades == 0 || std::tie(at, id) > std::tie(close_at, close_trade)) close = p, close_at = at, close_trade = id;
    high = trades == 0 ? p : std::max(high, p);
    low = trades == 0 ? p : std::min(low, p);
    ++trades;
    gpu_seconds += gs;
    notional += gs * p;
    if (t.green_tier != GreenTier::none) green_gpu_seconds += gs;
    discount += gs * std::max<std::int64_t>(0, t.list_price.value - p);
  }
};

// A PostgreSQL array literal ("{a,b,c}") built one element at a time. Elements are numbers, market
// ids and bucket names, none of which needs quoting.
class Array {
 public:
  void add(std::string_view v) {
    text_ += text_.empty() ? "{" : ",";
    text_ += v;
  }
  void add(std::int64_t v) { add(std::to_string(v)); }
  void add_i128(Int128 v) { add(to_text(v)); }
  void add(bool v) { add(std::string_view(v ? "t" : "f")); }
  store::Param param() const { return text_.empty() ? std::string("{}") : text_ + "}"; }

 private:
  std::string text_;
};

std::int64_t floor_to(std::int64_t t, std::int64_t step) {
  std::int64_t r = t % step;
  return r < 0 ? t - r - step : t - r;
}

// Σ price × the part of its volume inside a 5 % tail, walking the ladder from one end: a price's
// volume [c0, c1) counts ×20 up to V (the rule DESIGN.md §5 gives; the SQL function that did this before,
// from migration 0006, was dropped by migration 0009).
template <class It>
Int128 tail_x20(It it, It end, Int128 v) {
  Int128 cut = 0, c = 0;
  for (; it != end && 20 * c < v; ++it) {
    cut += Int128(it->first) * (std::min<Int128>(20 * (c + it->second), v) - 20 * c);
    c += it->second;
  }
  return cut;
}

}  // namespace

std::optional<std::int64_t> parse_interval(std::string_view name) {
  if (name == "1m") return 60;
  if (name == "5m") return 300;
  if (name == "1h") return 3600;
  if (name == "1d") return 86400;
  return std::nullopt;
}

std::string_view interval_name(std::int64_t seconds) {
  switch (seconds) {
    case 60: return "1m";
    case 300: return "5m";
    case 3600: return "1h";
    case 86400: return "1d";
  }
  return "?";
}

std::string to_text(Int128 v) {
  bool negative = v < 0;
  std::string out;
  do {
    int digit = static_cast<int>(v % 10);
    out.push_back(static_cast<char>('0' + (digit < 0 ? -digit : digit)));
    v /= 10;
  } while (v != 0);
  if (negative) out.push_back('-');
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<Int128> parse_int128(std::string_view text) {
  bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  // A numeric with a zero fraction ("12.000") is still an integer.
  if (auto dot = text.find('.'); dot != std::string_view::npos) {
    if (text.find_first_not_of('0', dot + 1) != std::string_view::npos) return std::nullopt;
    text = text.substr(0, dot);
  }
  if (text.empty() || text.size() > 37) return std::nullopt;
  Int128 v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return negative ? -v : v;
}

void Rollups::prepare(store::PgConnection& conn) {
  ladders_.clear();  // a new connection: whatever failed before it is not in memory
  for (const auto& s : kStatements) conn.prepare(s);
}

namespace {
void collect(const std::vector<store::Batch>& batches, std::vector<const Trade*>& trades, std::vector<const Lease*>* leases) {
  for (const auto& batch : batches) {
    for (const auto& logged : batch) {
      for (const auto& e : logged.events) {
        if (const auto* t = std::get_if<TradeEvent>(&e)) trades.push_back(&t->trade);
        else if (const auto* l = std::get_if<LeaseChanged>(&e); l && leases) leases->push_back(&l->lease);
      }
    }
  }
}
}  // namespace

void Rollups::before(store::PgConnection& conn, const std::vector<store::Batch>& batches) {
  std::vector<const Trade*> trades;
  collect(batches, trades, nullptr);
  load_days(conn, trades);
}

std::size_t Rollups::write(store::Pipeline& pipe, const std::vector<store::Batch>& batches) {
  std::vector<const Trade*> trades;
  std::vector<const Lease*> leases;
  collect(batches, trades, &leases);
  return write_rows(pipe, trades, leases);
}

void Rollups::load_days(store::PgConnection& conn, std::span<const Trade* const> trades) {
  // Bounded memory: past days are read again if they are ever touched again.
  if (ladders_.size() > 4096) ladders_.clear();
  Array markets, days;
  std::vector<std::pair<std::string, std::int64_t>> missing;
  for (const Trade* t : trades) {
    if (!t->bucket.is_spot()) continue;
    std::pair<std::string, std::int64_t> key{std::string(t->market.value()), floor_to(t->time.value, 86400)};
    if (ladders_.count(key) || std::find(missing.begin(), missing.end(), key) != missing.end()) continue;
    markets.add(key.first), days.add(key.second);
    missing.push_back(std::move(key));
  }
  if (missing.empty()) return;
  auto rows = conn.exec(kLoadLadders, {markets.param(), days.param()});
  std::map<std::pair<std::string, std::int64_t>, Ladder> loaded;
  for (auto& key : missing) loaded[key];
  for (int i = 0; i < rows.rows(); ++i) {
    auto& ladder = loaded[{std::string(rows.text(i, 0)), rows.integer(i, 1)}];
    auto volume = parse_int128(rows.text(i, 3));
    if (!volume) throw store::StoreError("index_prices: gpu_seconds is not an integer");
    std::int64_t price = rows.integer(i, 2);
    ladder.volume[price] = *volume;
    ladder.gpu_seconds += *volume;
    ladder.notional += *volume * price;
    ladder.trades += rows.integer(i, 4);
  }
  ladders_.merge(loaded);
}

std::size_t Rollups::write_rows(store::Pipeline& pipe, std::span<const Trade* const> trades,
                           std::span<const Lease* const> leases) {
  std::size_t statements = 0;
  if (!trades.empty()) {
    // (market, bucket, interval, period start) -> candle; std::map keeps a stable order, so two
    // transactions touching the same rows lock them in the same order.
    std::map<std::tuple<std::string, std::string, std::int64_t, std::int64_t>, Candle> candles;
    std::map<std::pair<std::string, std::string>, std::tuple<std::int64_t, std::int64_t, std::int64_t>> last;
    std::map<std::tuple<std::string, std::int64_t, std::int64_t>, std::pair<Int128, std::int64_t>> index_prices;
    for (const Trade* t : trades) {
      const std::string market(t->market.value());
      std::string bucket = to_string(t->bucket);
      for (auto interval : kIntervals) {
        candles[{market, bucket, interval, floor_to(t->time.value, interval)}].add(*t);
      }
      auto& l = last[{market, bucket}];
      if (std::tie(t->time.value, t->id.value) > std::tie(std::get<0>(l), std::get<1>(l))) {
        l = {t->time.value, t->id.value, t->price.value};
      }
      if (t->bucket.is_spot()) {
        auto& p = index_prices[{market, floor_to(t->time.value, 86400), t->price.value}];
        p.first += t->gpu_seconds();
        ++p.second;
      }
    }

    Array c[17];
    for (const auto& [key, k] : candles) {
      const auto& [market, bucket, interval, period] = key;
      c[0].add(market), c[1].add(bucket), c[2].add(interval), c[3].add(period);
      c[4].add(k.open), c[5].add(k.open_at), c[6].add(k.open_trade), c[7].add(k.high), c[8].add(k.low);
      c[9].add(k.close), c[10].add(k.close_at), c[11].add(k.close_trade), c[12].add(k.trades);
      c[13].add_i128(k.gpu_seconds), c[14].add_i128(k.notional), c[15].add_i128(k.green_gpu_seconds);
      c[16].add_i128(k.discount);
    }
    std::vector<store::Param> params;
    for (const auto& a : c) params.push_back(a.param());
    pipe.send(kUpsertCandles, params);

    Array l[5];
    for (const auto& [key, v] : last) {
      l[0].add(key.first), l[1].add(key.second);
      l[2].add(std::get<0>(v)), l[3].add(std::get<1>(v)), l[4].add(std::get<2>(v));
    }
    pipe.send(kUpsertLast, {l[0].param(), l[1].param(), l[2].param(), l[3].param(), l[4].param()});
    statements += 2;

    if (!index_prices.empty()) {
      Array p[5], d[6];
      std::vector<std::pair<std::string, std::int64_t>> touched;  // in index_prices' (sorted) order
      for (const auto& [key, volume] : index_prices) {
        const auto& [market, day, price] = key;
        p[0].add(market), p[1].add(day), p[2].add(price), p[3].add_i128(volume.first), p[4].add(volume.second);
        std::pair<std::string, std::int64_t> day_key{market, day};
        auto it = ladders_.find(day_key);
        if (it == ladders_.end()) throw store::StoreError("daily index: the day " + market + "/" + std::to_string(day) + " was not loaded");
        auto& ladder = it->second;
        ladder.volume[price] += volume.first;
        ladder.gpu_seconds += volume.first;
        ladder.notional += volume.first * price;
        ladder.trades += volume.second;
        if (touched.empty() || touched.back() != day_key) touched.push_back(std::move(day_key));
      }
      for (const auto& key : touched) {
        const auto& ladder = ladders_.at(key);
        Int128 cut = tail_x20(ladder.volume.begin(), ladder.volume.end(), ladder.gpu_seconds) +
                     tail_x20(ladder.volume.rbegin(), ladder.volume.rend(), ladder.gpu_seconds);
        d[0].add(key.first), d[1].add(key.second), d[2].add_i128(ladder.gpu_seconds), d[3].add_i128(ladder.notional);
        d[4].add_i128(20 * ladder.notional - cut), d[5].add(ladder.trades);
      }
      pipe.send(kUpsertIndexPrices, {p[0].param(), p[1].param(), p[2].param(), p[3].param(), p[4].param()});
      pipe.send(kSetDailyIndex, {d[0].param(), d[1].param(), d[2].param(), d[3].param(), d[4].param(), d[5].param()});
      statements += 2;
    }
  }
  if (!leases.empty()) {
    std::map<std::int64_t, const Lease*> last_state;
    for (const Lease* l : leases) last_state[l->id.value] = l;
    Array a[5];
    for (const auto& [id, l] : last_state) {
      a[0].add(id), a[1].add(l->market.value()), a[2].add(to_string(l->bucket));
      a[3].add_i128(Int128(l->quantity.value) * (l->end - l->start).value);
      a[4].add(l->status == LeaseStatus::reserved);
    }
    pipe.send(kLeases, {a[0].param(), a[1].param(), a[2].param(), a[3].param(), a[4].param()});
    ++statements;
  }
  return statements;
}

int ensure_trade_partitions(store::PgConnection& conn, std::int64_t from_at, std::int64_t to_at) {
  // Never holds up the writer for long: a partition that cannot get its locks is made next time.
  conn.exec_script("BEGIN; SET LOCAL lock_timeout = '2s'");
  try {
    auto r = conn.exec("SELECT gpuex_ensure_trade_partitions($1::bigint, $2::bigint)",
                       {std::to_string(from_at), std::to_string(to_at)});
    conn.exec_script("COMMIT");
    return static_cast<int>(r.integer(0, 0));
  } catch (...) {
    if (conn.healthy()) conn.exec_script("ROLLBACK");
    throw;
  }
}

}  // namespace gpuex::analytics
