-- Documents stored as `json` (their text, checked to be JSON) instead of `jsonb`: nothing reads them
-- inside PostgreSQL except by key (->> works on json too) and the API answers with their text
-- (doc::text), so building jsonb's binary form on every insert and every rewrite of an order was
-- work no reader used. The command log is replayed from its text too. Leases keep jsonb (a reader
-- edits them with jsonb_set), and so do pools (few rows).
ALTER TABLE engine_commands ALTER COLUMN body TYPE json USING body::json;
ALTER TABLE orders ALTER COLUMN doc TYPE json USING doc::json;
ALTER TABLE trades ALTER COLUMN print TYPE json USING print::json,
                   ALTER COLUMN buyer_fill TYPE json USING buyer_fill::json,
                   ALTER COLUMN seller_fill TYPE json USING seller_fill::json;
