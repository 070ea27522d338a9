-- The daily index without re-reading the whole day (DESIGN.md §5). The trimmed sum is the day's whole
-- Σ price × volume less its two 5 % tails, so each day keeps that sum (`notional`, added to by the
-- writer like gpu_seconds and trades) and only the tails are read back, cheapest and dearest prices
-- first, by the primary key: a transaction's cost no longer grows with every price the day has traded.
ALTER TABLE daily_index ADD COLUMN notional numeric NOT NULL DEFAULT 0;  -- Σ price_micros × gpu_seconds
UPDATE daily_index d SET notional = s.notional
FROM (SELECT market, day, sum(price_micros * gpu_seconds) AS notional FROM index_prices GROUP BY 1, 2) s
WHERE s.market = d.market AND s.day = d.day;
ALTER TABLE daily_index ALTER COLUMN notional DROP DEFAULT;

-- trimmed_x20 of each given (market, day) from its gpu_seconds (V) and notional: ×20, a price's
-- volume [c0, c1) in price order counts where it lies in [V/20, 19V/20], so 20 × notional less
-- Σ price × (min(20 c1, V) − 20 c0) over the prices with 20 c0 < V, from each end.
CREATE FUNCTION gpuex_refresh_daily_index(markets text[], days bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v numeric;
  total numeric;
  cut numeric;
  c numeric;
  r record;
BEGIN
  FOR i IN 1 .. coalesce(array_length(markets, 1), 0) LOOP
    SELECT gpu_seconds, 20 * notional INTO v, total FROM daily_index WHERE market = markets[i] AND day = days[i];
    CONTINUE WHEN v IS NULL;
    cut := 0;
    c := 0;
    FOR r IN SELECT price_micros, gpu_seconds FROM index_prices
             WHERE market = markets[i] AND day = days[i] ORDER BY price_micros LOOP
      EXIT WHEN 20 * c >= v;
      cut := cut + r.price_micros * (least(20 * (c + r.gpu_seconds), v) - 20 * c);
      c := c + r.gpu_seconds;
    END LOOP;
    c := 0;
    FOR r IN SELECT price_micros, gpu_seconds FROM index_prices
             WHERE market = markets[i] AND day = days[i] ORDER BY price_micros DESC LOOP
      EXIT WHEN 20 * c >= v;
      cut := cut + r.price_micros * (least(20 * (c + r.gpu_seconds), v) - 20 * c);
      c := c + r.gpu_seconds;
    END LOOP;
    UPDATE daily_index SET trimmed_x20 = total - cut WHERE market = markets[i] AND day = days[i];
  END LOOP;
END $$;
