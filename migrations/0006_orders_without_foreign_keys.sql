-- The store writer is the only writer of orders, and it writes only what the engine accepted: an
-- order's account is the caller its API key authenticated, and its market one of the engine's markets
-- (loaded from `markets`); neither accounts nor markets are ever deleted. The two foreign keys'
-- checks (a trigger and a key-share lock of the parent row per order row) cost about a third of an
-- order row's insert (bench/README.md, e2e), on the path every durable ack waits for. trades and
-- leases never had them; pools, api_keys and idempotency_keys (rare writes) keep theirs.
ALTER TABLE orders DROP CONSTRAINT orders_account_id_fkey, DROP CONSTRAINT orders_market_fkey;
