// bench_analytics: analytics queries on the rollups beside the same answer from raw trades.
//
// Loads N synthetic trades (default 10,000,000) over the 180 days before now in 10 markets into a
// fresh database of the bench cluster (COPY, with progress), and builds the rollups through the code
// that maintains them in gpuexd (analytics::Rollups::write, the writer's transaction part), fed in time
// order in batches of 100,000 trades. Then times, on one connection: 1h candles for 30 days, 1d candles
// for 180 days, the forward curve, the index for 90 days and the 24 h stats - each the SQL the
// endpoint runs (server/analytics/queries.hpp) - beside a plain GROUP BY over the raw trades that gives
// the same answer (checked equal once per workload). Each query first runs once per market untimed
// (both sides), then rollup and raw runs cycle through the 10 markets.
//
// `scripts/bench analytics [--trades N] [--runs R] [--raw-runs R] [--reuse] [--json]`
// (`--reuse` keeps a database already loaded with N trades; `--json`: one object per query).
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "matching/lease.hpp"
#include "matching/trade.hpp"
#include "server/analytics/queries.hpp"
#include "server/analytics/rollups.hpp"
#include "server/rfc3339.hpp"
#include "server/store/connection.hpp"
#include "server/store/migrations.hpp"

namespace {

using namespace gpuex;
using Clock = std::chrono::steady_clock;

const char* kMarkets[] = {"H100-SXM-80G", "H100-PCIE-80G", "H200-SXM-141G", "H200-NVL-141G", "B200-180G",
                          "A100-SXM-80G", "A100-PCIE-80G", "L40S-48G",     "RTX4090-24G",   "V100-SXM2-32G"};
// A typical USD/GPU-hour for each market, in micro-dollars.
const std::int64_t kBase[] = {2'400'000, 1'900'000, 3'200'000, 2'900'000, 4'500'000,
                              1'300'000, 1'000'000, 900'000,   400'000,   300'000};
const char* kRegions[] = {"US", "DE", "IS", "NO", "FR", "JP", "SG", "CA"};
constexpr std::int64_t kDay = 86400;
constexpr std::int64_t kSpan = 180 * kDay;
constexpr std::int64_t kBatch = 100'000;

struct Options {
  std::int64_t trades = 10'000'000;
  int runs = 200;
  int raw_runs = 10;
  bool reuse = false;
  bool json = false;
};

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

std::string num(std::int64_t v) { return std::to_string(v); }

// The synthetic market: trades in time order, each market's price a daily random walk with noise,
// 70 % spot (windows of 10 min to 1 day from the trade), 30 % forward (1 h to 3 days starting 1 to
// 120 days ahead), 20 % on green_plus pools (list price = price / 0.8 rounded up to the tick).
class Generator {
 public:
  Generator(std::int64_t n, std::int64_t end) : n_(n), start_(end - kSpan), rng_(20261129) {
    for (std::size_t m = 0; m < std::size(kMarkets); ++m) level_[m] = kBase[m];
  }

  matching::Trade next(std::int64_t i) {
    matching::Trade t;
    std::int64_t at = start_ + static_cast<std::int64_t>((static_cast<matching::Int128>(i) * kSpan) / n_);
    std::int64_t day = (at - start_) / kDay;
    while (day_ < day) {  // a new day: every market's level moves by up to ±3 %
      ++day_;
      for (std::size_t m = 0; m < std::size(kMarkets); ++m) {
        level_[m] = std::max<std::int64_t>(100'000, level_[m] + level_[m] * (static_cast<int>(rng_() % 61) - 30) / 1000);
      }
    }
    std::size_t m = rng_() % std::size(kMarkets);
    t.id = matching::TradeId(i + 1);
    t.market = matching::MarketId{kMarkets[m]};
    t.time = matching::Seconds(at);
    std::int64_t price = level_[m] + level_[m] * (static_cast<int>(rng_() % 201) - 100) / 1000;  // ±10 %
    price = price / 100 * 100;
    bool green = rng_() % 5 == 0;
    t.price = matching::Price(price);
    t.list_price = matching::Price(green ? (price * 10 / 8 + 99) / 100 * 100 : price);
    t.green_discount_bps = green ? 2000 : 0;
    t.green_tier = green ? matching::GreenTier::green_plus : matching::GreenTier::none;
    t.quantity = matching::Qty(std::int64_t{1} << (rng_() % 5));  // 1..16 GPUs
    if (rng_() % 10 < 7) {
      t.start = matching::Seconds(at);
      t.end = matching::Seconds(at + 600 * (1 + static_cast<std::int64_t>(rng_() % 144)));
      t.bucket = matching::Bucket::spot();
    } else {
      std::int64_t s = (at / 3600 + 24 * (1 + static_cast<std::int64_t>(rng_() % 120))) * 3600;
      t.start = matching::Seconds(s);
      t.end = matching::Seconds(s + 3600 * (1 + static_cast<std::int64_t>(rng_() % 72)));
      t.bucket = matching::month_bucket(t.start);
    }
    t.tier = static_cast<matching::Tier>(rng_() % 2);
    t.region = kRegions[rng_() % std::size(kRegions)];
    t.buyer = matching::AccountId(1 + static_cast<std::int64_t>(rng_() % 500));
    t.seller = matching::AccountId(501 + static_cast<std::int64_t>(rng_() % 100));
    t.pool = matching::PoolId(1000 + static_cast<std::int64_t>(m) * 100 + static_cast<std::int64_t>(rng_() % 100));
    t.buy_order = matching::OrderId(2 * i + 1);
    t.sell_order = matching::OrderId(2 * i + 2);
    t.lease = matching::LeaseId(i + 1);
    t.taker = rng_() % 2 ? matching::Side::buy : matching::Side::sell;
    return t;
  }

 private:
  std::int64_t n_, start_;
  std::mt19937_64 rng_;
  std::int64_t level_[std::size(kMarkets)];
  std::int64_t day_ = 0;
};

std::string price_text(std::int64_t micros) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%04lld", static_cast<long long>(micros / 1'000'000),
                static_cast<long long>(micros % 1'000'000 / 100));
  return buf;
}

// One COPY text line of trades (the public print as the writer stores it; the per-side fills as {}).
void copy_line(std::string& out, const matching::Trade& t) {
  std::string bucket = matching::to_string(t.bucket);
  std::string tier(matching::to_string(t.tier)), green(matching::to_string(t.green_tier));
  std::int64_t gs = t.gpu_seconds();
  char hours[48];
  std::snprintf(hours, sizeof hours, "%lld.%06lld", static_cast<long long>(gs / 3600),
                static_cast<long long>((gs % 3600) * 1'000'000 / 3600));
  std::string print = "{\"trade_id\": \"" + num(t.id.value) + "\", \"time\": \"" + format_rfc3339(t.time.value) +
                      "\", \"bucket\": \"" + bucket + "\", \"price\": \"" + price_text(t.price.value) +
                      "\", \"list_price\": \"" + price_text(t.list_price.value) + "\", \"green_discount_bps\": " +
                      num(t.green_discount_bps) + ", \"quantity\": " + num(t.quantity.value) + ", \"start\": \"" +
                      format_rfc3339(t.start.value) + "\", \"end\": \"" + format_rfc3339(t.end.value) +
                      "\", \"gpu_hours\": \"" + hours + "\", \"tier\": \"" + tier + "\", \"region\": \"" + t.region +
                      "\", \"green_tier\": \"" + green + "\", \"preemption\": false}";
  out += num(t.id.value) + '\t' + num(t.time.value) + '\t' + std::string(t.market.value()) + '\t' + bucket + '\t' +
         num(t.buy_order.value) + '\t' + num(t.sell_order.value) + '\t' + num(t.buyer.value) + '\t' +
         num(t.seller.value) + '\t' + num(t.pool.value) + '\t' + num(t.lease.value) + '\t' + num(t.quantity.value) +
         '\t' + num(t.start.value) + '\t' + num(t.end.value) + '\t' + num(t.price.value) + '\t' +
         num(t.list_price.value) + '\t' + num(t.green_discount_bps) + "\tf\t" +
         std::string(t.taker == matching::Side::buy ? "buy" : "sell") + '\t' + print + "\t{}\t{}\t" + tier + '\t' +
         t.region + '\t' + green + '\n';
}

void copy(store::PgConnection& db, const std::string& data) {
  PGconn* c = db.raw();
  PGresult* r = PQexec(c,
                       "COPY trades (id, at, market, bucket, buy_order_id, sell_order_id, buyer_id, seller_id, "
                       "pool_id, lease_id, quantity, start_at, end_at, price_micros, list_price_micros, "
                       "green_discount_bps, preemption, taker_side, print, buyer_fill, seller_fill, tier, region, "
                       "green_tier) FROM STDIN");
  bool ok = PQresultStatus(r) == PGRES_COPY_IN;
  PQclear(r);
  if (!ok) throw store::StoreError(std::string("COPY: ") + PQerrorMessage(c));
  if (PQputCopyData(c, data.data(), static_cast<int>(data.size())) != 1 || PQputCopyEnd(c, nullptr) != 1) {
    throw store::StoreError(std::string("COPY: ") + PQerrorMessage(c));
  }
  while (PGresult* res = PQgetResult(c)) {
    bool good = PQresultStatus(res) == PGRES_COMMAND_OK;
    std::string why = PQresultErrorMessage(res);
    PQclear(res);
    if (!good) throw store::StoreError("COPY: " + why);
  }
}

void load(store::PgConnection& db, const Options& o, std::int64_t end) {
  Generator gen(o.trades, end);
  analytics::Rollups rollups;
  rollups.prepare(db);
  auto t0 = Clock::now();
  double copy_ms = 0, rollup_ms = 0;
  // The next batch is generated on another thread while PostgreSQL takes the current one.
  struct Chunk {
    std::vector<matching::Trade> trades;
    std::string data;
  };
  auto make = [&gen, &o](std::int64_t from) {
    Chunk c;
    std::int64_t to = std::min(o.trades, from + kBatch);
    c.trades.reserve(static_cast<std::size_t>(to - from));
    for (std::int64_t i = from; i < to; ++i) {
      c.trades.push_back(gen.next(i));
      copy_line(c.data, c.trades.back());
    }
    return c;
  };
  auto pending = std::async(std::launch::async, make, 0);
  for (std::int64_t from = 0; from < o.trades; from += kBatch) {
    std::int64_t to = std::min(o.trades, from + kBatch);
    Chunk chunk = pending.get();
    if (to < o.trades) pending = std::async(std::launch::async, make, to);
    auto& trades = chunk.trades;
    const auto& data = chunk.data;
    auto c0 = Clock::now();
    copy(db, data);
    copy_ms += ms_since(c0);
    // The leases these trades create, as the engine reports them: reserved until their window starts
    // (a lease whose window started by the end of the load is already active).
    std::vector<matching::Lease> leases(trades.size());
    std::vector<const matching::Trade*> tp;
    std::vector<const matching::Lease*> lp;
    for (std::size_t k = 0; k < trades.size(); ++k) {
      const auto& t = trades[k];
      auto& l = leases[k];
      l.id = t.lease, l.trade = t.id, l.market = t.market, l.quantity = t.quantity, l.start = t.start, l.end = t.end;
      l.bucket = t.bucket;
      l.status = t.start.value > end ? matching::LeaseStatus::reserved : matching::LeaseStatus::active;
      tp.push_back(&t);
      lp.push_back(&l);
    }
    auto r0 = Clock::now();
    rollups.load_days(db, tp);
    {
      store::Pipeline pipe(db);
      pipe.send("BEGIN");
      rollups.write_rows(pipe, tp, lp);
      pipe.send("COMMIT");
      pipe.sync();
    }
    rollup_ms += ms_since(r0);
    std::fprintf(stderr, "\rloaded %lld / %lld trades (%.0f s: COPY %.0f s, rollups %.0f s)   ",
                 static_cast<long long>(to), static_cast<long long>(o.trades), ms_since(t0) / 1000, copy_ms / 1000,
                 rollup_ms / 1000);
  }
  std::fprintf(stderr, "\nanalyzing\n");
  db.exec_script("ANALYZE");
  std::fprintf(stderr, "load done in %.0f s (COPY %.0f s, rollups %.0f s)\n", ms_since(t0) / 1000, copy_ms / 1000,
               rollup_ms / 1000);
}

// The raw GROUP BY queries: the same answers as the rollup queries, from trades alone.
constexpr const char* kRawCandles = R"sql(
SELECT at / $3 * $3 AS period_start, (array_agg(price_micros ORDER BY at, id))[1], max(price_micros),
       min(price_micros), (array_agg(price_micros ORDER BY at DESC, id DESC))[1], count(*),
       sum(quantity::numeric * (end_at - start_at)), sum(price_micros::numeric * quantity * (end_at - start_at))
FROM trades WHERE market = $1 AND bucket = $2 AND at >= $4 AND at < $5
GROUP BY 1 ORDER BY 1)sql";
constexpr const char* kRawLast = R"sql(
SELECT DISTINCT ON (bucket) bucket, price_micros, at FROM trades
WHERE market = $1 AND bucket <> 'spot' AND bucket >= $2 ORDER BY bucket, at DESC, id DESC)sql";
constexpr const char* kRawWeek = R"sql(
SELECT bucket, sum(quantity::numeric * (end_at - start_at)), sum(price_micros::numeric * quantity * (end_at - start_at)),
       count(*)
FROM trades WHERE market = $1 AND at >= $3 AND bucket <> 'spot' AND bucket >= $2 GROUP BY bucket)sql";
// Open interest from raw trades: the leases of trades whose window has not started are reserved.
constexpr const char* kRawOpenInterest = R"sql(
SELECT bucket, sum(quantity::numeric * (end_at - start_at)) FROM trades
WHERE market = $1 AND bucket <> 'spot' AND bucket >= $2 AND start_at > $3 GROUP BY bucket)sql";
constexpr const char* kRawStats = R"sql(
SELECT count(*), coalesce(sum(quantity::numeric * (end_at - start_at)), 0),
       coalesce(sum(price_micros::numeric * quantity * (end_at - start_at)), 0), max(price_micros), min(price_micros),
       coalesce(sum(quantity::numeric * (end_at - start_at)) FILTER (WHERE green_tier <> 'none'), 0),
       coalesce(sum(greatest(0, list_price_micros - price_micros)::numeric * quantity * (end_at - start_at)), 0)
FROM trades WHERE market = $1 AND at >= $2 AND at <= $3)sql";
constexpr const char* kRawIndex = R"sql(
SELECT day, v, sum(price_micros * greatest(0, least(20 * c1, 19 * v) - greatest(20 * c0, v))), count(*)
FROM (SELECT at / 86400 * 86400 AS day, price_micros, g,
             sum(g) OVER w - g AS c0, sum(g) OVER w AS c1, sum(g) OVER (PARTITION BY at / 86400) AS v
      FROM (SELECT at, id, price_micros, quantity::numeric * (end_at - start_at) AS g FROM trades
            WHERE market = $1 AND bucket = 'spot' AND at >= $2 AND at < $3) t
      WINDOW w AS (PARTITION BY at / 86400 ORDER BY price_micros, id)) h
GROUP BY day, v ORDER BY day)sql";

// The text of every cell, to compare two answers.
std::vector<std::vector<std::string>> cells(const store::PgResult& r) {
  std::vector<std::vector<std::string>> out;
  for (int i = 0; i < r.rows(); ++i) {
    std::vector<std::string> row;
    for (int j = 0; j < r.columns(); ++j) row.emplace_back(r.is_null(i, j) ? "NULL" : std::string(r.text(i, j)));
    out.push_back(std::move(row));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Workload {
  std::string name;
  // Runs the query for market `m`; returns the answer's cells (for the equality check).
  std::function<std::vector<std::vector<std::string>>(store::PgConnection&, const std::string& m)> rollup, raw;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  std::size_t k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(k, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::int64_t {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::stoll(argv[++i]);
    };
    if (a == "--trades") o.trades = value();
    else if (a == "--runs") o.runs = static_cast<int>(value());
    else if (a == "--raw-runs") o.raw_runs = static_cast<int>(value());
    else if (a == "--reuse") o.reuse = true;
    else if (a == "--json") o.json = true;
    else {
      std::fprintf(stderr, "usage: bench_analytics [--trades N] [--runs R] [--raw-runs R] [--reuse] [--json]\n");
      return 2;
    }
  }
  if (o.trades < 1000 || o.runs < 1 || o.raw_runs < 1) {
    std::fprintf(stderr, "--trades must be at least 1000, runs at least 1\n");
    return 2;
  }
  const char* dsn_env = std::getenv("GPUEX_BENCH_DSN");
  if (!dsn_env || !*dsn_env) {
    std::fprintf(stderr, "GPUEX_BENCH_DSN is not set: run through scripts/bench analytics\n");
    return 2;
  }
  std::string base(dsn_env);
  base = base.substr(0, base.rfind('/'));
  std::string name = "gpuex_bench_analytics";
  std::string dsn = base + "/" + name;

  std::int64_t end = 0;
  bool loaded = false;
  if (o.reuse) {
    try {
      auto db = store::PgConnection::connect(dsn);
      auto r = db.exec("SELECT trades, end_at FROM bench_meta");
      if (r.rows() == 1 && r.integer(0, 0) == o.trades) {
        end = r.integer(0, 1);
        loaded = true;
        std::fprintf(stderr, "reusing %s: %lld trades ending %s\n", name.c_str(), static_cast<long long>(o.trades),
                     format_rfc3339(end).c_str());
      }
    } catch (const store::StoreError&) {
    }
  }
  if (!loaded) {
    end = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    end -= end % 60;
    auto admin = store::PgConnection::connect(base + "/postgres");
    admin.exec_script("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    admin.exec_script("CREATE DATABASE " + name);
    auto db = store::PgConnection::connect(dsn);
    store::apply_migrations(db);
    analytics::ensure_trade_partitions(db, end - kSpan, end + 100 * kDay);
    std::fprintf(stderr, "loading %lld trades over the 180 days before %s into %s\n", static_cast<long long>(o.trades),
                 format_rfc3339(end).c_str(), name.c_str());
    load(db, o, end);
    db.exec_script("CREATE TABLE bench_meta (trades bigint, end_at bigint)");
    db.exec("INSERT INTO bench_meta VALUES ($1::bigint, $2::bigint)", {num(o.trades), num(end)});
  }

  auto db = store::PgConnection::connect(dsn);
  std::string month = format_rfc3339(end).substr(0, 7);
  std::int64_t week_from = end - end % kDay - 6 * kDay;
  std::int64_t to = end + 1;
  using Rows = std::vector<std::vector<std::string>>;
  auto candles = [&](std::int64_t interval, std::int64_t days) {
    std::int64_t from = (to - days * kDay) / interval * interval;
    return Workload{
        std::string(interval == 3600 ? "candles_1h_30d" : "candles_1d_180d"),
        [=](store::PgConnection& c, const std::string& m) {
          return cells(c.exec(analytics::sql::kSelectCandles, {m, "spot", num(interval), num(from), num(to)}));
        },
        [=](store::PgConnection& c, const std::string& m) {
          return cells(c.exec(kRawCandles, {m, "spot", num(interval), num(from), num(to)}));
        }};
  };
  std::vector<Workload> workloads;
  workloads.push_back(candles(3600, 30));
  workloads.push_back(candles(86400, 180));
  workloads.push_back(Workload{
      "forward_curve",
      [=](store::PgConnection& c, const std::string& m) {
        Rows out;
        for (auto& r : cells(c.exec(analytics::sql::kSelectLast, {m, month}))) out.push_back(r);
        for (auto& r : cells(c.exec(analytics::sql::kSelectWeek, {m, month, num(week_from)}))) out.push_back(r);
        for (auto& r : cells(c.exec(analytics::sql::kSelectOpenInterest, {m, month}))) out.push_back(r);
        return out;
      },
      [=](store::PgConnection& c, const std::string& m) {
        Rows out;
        for (auto& r : cells(c.exec(kRawLast, {m, month}))) out.push_back(r);
        for (auto& r : cells(c.exec(kRawWeek, {m, month, num(week_from)}))) out.push_back(r);
        for (auto& r : cells(c.exec(kRawOpenInterest, {m, month, num(end)}))) out.push_back(r);
        return out;
      }});
  {
    std::int64_t from = (to - 90 * kDay) / kDay * kDay;
    workloads.push_back(Workload{
        "index_90d",
        [=](store::PgConnection& c, const std::string& m) {
          return cells(c.exec(analytics::sql::kSelectIndex, {m, num(from), num(to)}));
        },
        [=](store::PgConnection& c, const std::string& m) { return cells(c.exec(kRawIndex, {m, num(from), num(to)})); }});
  }
  {
    std::int64_t from = end - end % 60 + 60 - kDay;
    workloads.push_back(Workload{
        "stats_24h",
        [=](store::PgConnection& c, const std::string& m) {
          std::int64_t first_hour = (from + 3599) / 3600 * 3600, last_hour = end / 3600 * 3600;
          return cells(c.exec(analytics::sql::kSelectStats, {m, num(from), num(end), num(first_hour), num(last_hour)}));
        },
        [=](store::PgConnection& c, const std::string& m) {
          return cells(c.exec(kRawStats, {m, num(from), num(end)}));
        }});
  }

  int failures = 0;
  for (const auto& w : workloads) {
    // Same answer: the raw queries return the rollup queries' columns, so the cells compare directly.
    auto a = w.rollup(db, kMarkets[0]);
    auto b = w.raw(db, kMarkets[0]);
    if (a != b) {
      std::fprintf(stderr, "%s: the rollup answer (%zu rows) differs from the raw one (%zu rows)\n", w.name.c_str(),
                   a.size(), b.size());
      ++failures;
    }
    // Warm-up, untimed: every market once each way, so both sides are timed with warm caches.
    for (const char* m : kMarkets) {
      w.rollup(db, m);
      w.raw(db, m);
    }
    std::vector<double> fast, slow;
    for (int i = 0; i < o.runs; ++i) {
      auto t = Clock::now();
      w.rollup(db, kMarkets[static_cast<std::size_t>(i) % std::size(kMarkets)]);
      fast.push_back(ms_since(t));
    }
    for (int i = 0; i < o.raw_runs; ++i) {
      auto t = Clock::now();
      w.raw(db, kMarkets[static_cast<std::size_t>(i) % std::size(kMarkets)]);
      slow.push_back(ms_since(t));
    }
    double p50 = percentile(fast, 0.5), p95 = percentile(fast, 0.95), raw95 = percentile(slow, 0.95);
    if (o.json) {
      std::printf("{\"workload\": \"%s\", \"p50_ms\": %.3f, \"p95_ms\": %.3f, \"raw_p95_ms\": %.3f, \"speedup\": %.1f}\n",
                  w.name.c_str(), p50, p95, raw95, raw95 / p95);
    } else {
      std::printf("%-16s rollups p50 %8.3f ms  p95 %8.3f ms   raw p50 %9.1f ms  p95 %9.1f ms   speedup %7.1fx\n",
                  w.name.c_str(), p50, p95, percentile(slow, 0.5), raw95, raw95 / p95);
    }
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
