-- The documents gpuexd writes and only reads back whole are stored as `text` instead of `json`: the
-- orders' documents, the command log's bodies and the trades' print and fills. `json` checked every
-- document by lexing it on the way in (json_recv / json_lex: ~3.4 % of the writer backend's samples
-- in the e2e bench, on ~0.7 KB of documents per command), which no reader needs: gpuexd serialises
-- them itself, the API answers with their text (doc::text), replay parses the bodies (and fails loudly
-- on a bad one). Someone querying them by key in SQL casts first: doc::json->>'status'. Leases and
-- pools keep jsonb (a reader edits leases with jsonb_set; the analytics views read pools by key).
ALTER TABLE engine_commands ALTER COLUMN body TYPE text;
ALTER TABLE orders ALTER COLUMN doc TYPE text;
ALTER TABLE trades ALTER COLUMN print TYPE text,
                   ALTER COLUMN buyer_fill TYPE text,
                   ALTER COLUMN seller_fill TYPE text;
