-- Price discovery (DESIGN.md §5): rollups maintained in the store writer's transaction, the same one
-- that inserts the trades (server/analytics/rollups.cpp), so they never miss or double-count a trade.
-- Volumes are GPU-seconds (GPUs × window seconds, exact integers; GPU-hours = ÷ 3600); money sums are
-- micro-dollars per GPU-hour × GPU-seconds, exact numerics (USD = ÷ 3600 ÷ 1e6, rounded once at the end).

-- What a trade print says about its pool, as columns for analysts (they were only in the print).
ALTER TABLE trades ADD COLUMN tier text NOT NULL DEFAULT '',
                   ADD COLUMN region text NOT NULL DEFAULT '',
                   ADD COLUMN green_tier text NOT NULL DEFAULT 'none';
UPDATE trades SET tier = print->>'tier', region = print->>'region', green_tier = print->>'green_tier';

-- Candles per market, bucket ('spot' or 'YYYY-MM'), interval (60, 300, 3600, 86400 s) and period
-- (start, Unix seconds, a multiple of the interval). Open and close keep the (time, trade id) they
-- came from, so a trade that arrives out of order still lands in the right place.
CREATE TABLE candles (
  market            text NOT NULL,
  bucket            text NOT NULL,
  interval_s        integer NOT NULL CHECK (interval_s IN (60, 300, 3600, 86400)),
  period_start      bigint NOT NULL CHECK (period_start % interval_s = 0),
  open_micros       bigint NOT NULL,
  open_at           bigint NOT NULL,
  open_trade        bigint NOT NULL,
  high_micros       bigint NOT NULL,
  low_micros        bigint NOT NULL,
  close_micros      bigint NOT NULL,
  close_at          bigint NOT NULL,
  close_trade       bigint NOT NULL,
  trades            bigint NOT NULL,
  gpu_seconds       numeric NOT NULL,  -- Σ GPUs × window seconds
  notional          numeric NOT NULL,  -- Σ price_micros × gpu_seconds (VWAP = notional / gpu_seconds)
  green_gpu_seconds numeric NOT NULL,  -- of trades on pools with a green tier at trade time
  discount          numeric NOT NULL,  -- Σ max(0, list_price_micros − price_micros) × gpu_seconds
  PRIMARY KEY (market, bucket, interval_s, period_start)
);
-- Stats read every bucket of one interval of a market over a time range.
CREATE INDEX candles_market_interval ON candles (market, interval_s, period_start);

-- The last trade of each (market, bucket): the forward curve's last price.
CREATE TABLE last_trades (
  market       text NOT NULL,
  bucket       text NOT NULL,
  at           bigint NOT NULL,
  trade_id     bigint NOT NULL,
  price_micros bigint NOT NULL,
  PRIMARY KEY (market, bucket)
);

-- The daily index's input: each UTC day's spot volume per price (prices are on the tick grid, so a
-- day has few rows), and the index itself, recomputed from its day's rows whenever they change.
CREATE TABLE index_prices (
  market       text NOT NULL,
  day          bigint NOT NULL CHECK (day % 86400 = 0),
  price_micros bigint NOT NULL,
  gpu_seconds  numeric NOT NULL,
  trades       bigint NOT NULL,
  PRIMARY KEY (market, day, price_micros)
);
-- value in micro-dollars per GPU-hour = trimmed_x20 / (18 × gpu_seconds): trimmed_x20 is
-- Σ price × (the part of its volume between the 5 % and 95 % cuts of the price-sorted day) × 20,
-- ×20 so that the cuts (V/20 and 19V/20) stay integers.
CREATE TABLE daily_index (
  market      text NOT NULL,
  day         bigint NOT NULL CHECK (day % 86400 = 0),
  gpu_seconds numeric NOT NULL,
  trimmed_x20 numeric NOT NULL,
  trades      bigint NOT NULL,
  PRIMARY KEY (market, day)
);

-- Open interest: GPU-seconds of `reserved` leases per (market, bucket of their trade). The leases
-- reserved now are kept one row each, so a status change subtracts exactly what the lease added.
CREATE TABLE reserved_leases (
  id          bigint PRIMARY KEY,
  market      text NOT NULL,
  bucket      text NOT NULL,
  gpu_seconds numeric NOT NULL
);
CREATE TABLE open_interest (
  market      text NOT NULL,
  bucket      text NOT NULL,
  gpu_seconds numeric NOT NULL,
  PRIMARY KEY (market, bucket)
);

-- Rollups of the trades already stored (a database migrated with history).
INSERT INTO candles
SELECT t.market, t.bucket, i.s, t.at - t.at % i.s,
       (array_agg(price_micros ORDER BY at, id))[1], min(at), (array_agg(id ORDER BY at, id))[1],
       max(price_micros), min(price_micros),
       (array_agg(price_micros ORDER BY at DESC, id DESC))[1], max(at), (array_agg(id ORDER BY at DESC, id DESC))[1],
       count(*), sum(quantity::numeric * (end_at - start_at)),
       sum(price_micros::numeric * quantity * (end_at - start_at)),
       coalesce(sum(quantity::numeric * (end_at - start_at)) FILTER (WHERE green_tier <> 'none'), 0),
       sum(greatest(0, list_price_micros - price_micros)::numeric * quantity * (end_at - start_at))
FROM trades t CROSS JOIN (VALUES (60), (300), (3600), (86400)) AS i (s)
GROUP BY t.market, t.bucket, i.s, t.at - t.at % i.s;
INSERT INTO last_trades
SELECT DISTINCT ON (market, bucket) market, bucket, at, id, price_micros FROM trades ORDER BY market, bucket, at DESC, id DESC;
INSERT INTO index_prices
SELECT market, at - at % 86400, price_micros, sum(quantity::numeric * (end_at - start_at)), count(*)
FROM trades WHERE bucket = 'spot' GROUP BY 1, 2, 3;
INSERT INTO daily_index
SELECT market, day, v, sum(price_micros * greatest(0, least(20 * c1, 19 * v) - greatest(20 * c0, v))), sum(trades)
FROM (SELECT market, day, price_micros, trades,
             sum(gpu_seconds) OVER w - gpu_seconds AS c0, sum(gpu_seconds) OVER w AS c1,
             sum(gpu_seconds) OVER (PARTITION BY market, day) AS v
      FROM index_prices WINDOW w AS (PARTITION BY market, day ORDER BY price_micros)) h
GROUP BY market, day, v;
INSERT INTO reserved_leases
SELECT l.id, l.market, t.bucket,
       (l.lease->>'quantity')::numeric * (extract(epoch FROM (l.lease->>'end')::timestamptz) -
                                          extract(epoch FROM (l.lease->>'start')::timestamptz))
FROM leases l JOIN trades t ON t.lease_id = l.id WHERE l.status = 'reserved';
INSERT INTO open_interest SELECT market, bucket, sum(gpu_seconds) FROM reserved_leases GROUP BY 1, 2;

-- Monthly trade partitions (DESIGN.md §6). Creates the partitions of the months that [from_at, to_at)
-- touches; rows of such a month already in the default partition move into the new one. gpuexd calls
-- it at start and every few hours for the months ahead; returns how many partitions it created.
CREATE FUNCTION gpuex_ensure_trade_partitions(from_at bigint, to_at bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  m date := date_trunc('month', to_timestamp(from_at) AT TIME ZONE 'UTC')::date;
  lo bigint;
  hi bigint;
  part text;
  made integer := 0;
BEGIN
  LOOP
    lo := extract(epoch FROM m::timestamp)::bigint;
    EXIT WHEN lo >= to_at;
    hi := extract(epoch FROM (m + interval '1 month')::timestamp)::bigint;
    part := 'trades_' || to_char(m, 'YYYY_MM');
    IF to_regclass(part) IS NULL THEN
      EXECUTE format('CREATE TABLE %I (LIKE trades INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
      EXECUTE format('WITH moved AS (DELETE FROM trades_default WHERE at >= %s AND at < %s RETURNING *) '
                     'INSERT INTO %I SELECT * FROM moved', lo, hi, part);
      EXECUTE format('ALTER TABLE trades ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', part, lo, hi);
      made := made + 1;
    END IF;
    m := (m + interval '1 month')::date;
  END LOOP;
  RETURN made;
END $$;
SELECT gpuex_ensure_trade_partitions(
  least(coalesce((SELECT min(at) FROM trades), extract(epoch FROM now())::bigint), extract(epoch FROM now())::bigint),
  extract(epoch FROM now() + interval '3 months')::bigint);

-- Views for analysts who query PostgreSQL directly (README.md "Analytics in SQL"). Prices in USD per
-- GPU-hour, volumes in GPU-hours; *_normalized = per H100-equivalent GPU-hour (÷ the market's perf_factor).
CREATE VIEW analytics_trades AS
SELECT t.id AS trade_id, to_timestamp(t.at) AS time, t.market, m.name AS market_name, m.perf_factor, t.bucket,
       t.price_micros / 1e6 AS price, t.list_price_micros / 1e6 AS list_price,
       round(t.price_micros / 1e6 / m.perf_factor, 6) AS price_normalized,
       t.green_discount_bps, t.quantity, to_timestamp(t.start_at) AS start, to_timestamp(t.end_at) AS "end",
       t.quantity * (t.end_at - t.start_at) / 3600.0 AS gpu_hours, t.preemption, t.taker_side,
       t.pool_id, t.seller_id AS provider_id, t.tier, t.region, t.green_tier,
       p.doc->>'fabric' AS fabric, (p.doc->>'fabric_gbps')::integer AS fabric_gbps, (p.doc->>'nvlink')::boolean AS nvlink,
       p.doc->>'sla_pct' AS sla_pct, p.doc->>'pue' AS pue, (p.doc->>'renewable_pct') AS renewable_pct,
       (p.doc->>'carbon_g_per_kwh') AS carbon_g_per_kwh
FROM trades t JOIN markets m ON m.id = t.market LEFT JOIN pools p ON p.id = t.pool_id;

CREATE VIEW analytics_candles AS
SELECT c.market, c.bucket, c.interval_s, to_timestamp(c.period_start) AS period_start,
       c.open_micros / 1e6 AS open, c.high_micros / 1e6 AS high, c.low_micros / 1e6 AS low,
       c.close_micros / 1e6 AS close, c.gpu_seconds / 3600 AS gpu_hours,
       round(c.notional / c.gpu_seconds / 1e6, 6) AS vwap,
       round(c.notional / c.gpu_seconds / 1e6 / m.perf_factor, 6) AS vwap_normalized, c.trades,
       c.green_gpu_seconds / 3600 AS green_gpu_hours, round(c.discount / 3600 / 1e6, 6) AS green_discount_usd
FROM candles c JOIN markets m ON m.id = c.market;

CREATE VIEW analytics_index AS
SELECT d.market, (to_timestamp(d.day) AT TIME ZONE 'UTC')::date AS day,
       round(d.trimmed_x20 / (18 * d.gpu_seconds) / 1e6, 6) AS value,
       round(d.trimmed_x20 / (18 * d.gpu_seconds) / 1e6 / m.perf_factor, 6) AS value_normalized,
       d.gpu_seconds / 3600 AS gpu_hours
FROM daily_index d JOIN markets m ON m.id = d.market;
