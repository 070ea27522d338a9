-- The exchange's system of record. The engine is rebuilt on start by replaying engine_commands;
-- the other tables are what the API reads (each row keeps the API's JSON document beside the
-- columns that queries filter on), written in the same transaction as the commands that made them.

-- Every sequenced command, in order: the engine's input, replayed through Engine::apply on start.
CREATE TABLE engine_commands (
  seq        bigint PRIMARY KEY CHECK (seq > 0),
  at         bigint NOT NULL,            -- the command's time, Unix seconds
  account_id bigint NOT NULL,
  kind       text NOT NULL,
  body       jsonb NOT NULL,
  logged_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pools (
  id          bigint PRIMARY KEY,        -- the seq of its AddPool
  provider_id bigint NOT NULL REFERENCES accounts (id),
  market      text NOT NULL REFERENCES markets (id),
  retired     boolean NOT NULL,
  doc         jsonb NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pools_provider ON pools (provider_id, id);

CREATE TABLE orders (
  id              bigint PRIMARY KEY,    -- the seq of its PlaceOrder
  account_id      bigint NOT NULL REFERENCES accounts (id),
  client_order_id text,
  body_sha256     bytea,                 -- of the request, to tell a repeat from a conflict
  side            text NOT NULL CHECK (side IN ('buy', 'sell')),
  market          text NOT NULL REFERENCES markets (id),
  status          text NOT NULL,
  doc             jsonb NOT NULL,
  created_at      bigint NOT NULL,
  updated_at      bigint NOT NULL
);
-- client_order_ids are never recycled.
CREATE UNIQUE INDEX orders_client_order_id ON orders (account_id, client_order_id) WHERE client_order_id IS NOT NULL;
CREATE INDEX orders_account ON orders (account_id, id DESC);
CREATE INDEX orders_account_open ON orders (account_id, id DESC) WHERE status IN ('open', 'partially_filled');

-- Trades, range-partitioned by month of the trade time (DESIGN.md §6); a default partition takes
-- what no monthly partition covers, so an insert never fails for want of one.
CREATE TABLE trades (
  id             bigint NOT NULL,
  at             bigint NOT NULL,        -- trade time, Unix seconds
  market         text NOT NULL,
  bucket         text NOT NULL,
  buy_order_id   bigint NOT NULL,
  sell_order_id  bigint NOT NULL,
  buyer_id       bigint NOT NULL,
  seller_id      bigint NOT NULL,
  pool_id        bigint NOT NULL,
  lease_id       bigint NOT NULL,
  quantity       integer NOT NULL,
  start_at       bigint NOT NULL,
  end_at         bigint NOT NULL,
  price_micros   bigint NOT NULL,
  list_price_micros bigint NOT NULL,
  green_discount_bps integer NOT NULL,
  preemption     boolean NOT NULL,
  taker_side     text NOT NULL,
  print          jsonb NOT NULL,         -- the public trade print
  buyer_fill     jsonb NOT NULL,         -- the trade as the buyer's fill
  seller_fill    jsonb NOT NULL,         -- the trade as the seller's fill
  PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
CREATE TABLE trades_default PARTITION OF trades DEFAULT;
CREATE INDEX trades_market_at ON trades (market, at DESC, id DESC);
CREATE INDEX trades_buyer ON trades (buyer_id, at DESC);
CREATE INDEX trades_seller ON trades (seller_id, at DESC);

CREATE TABLE leases (
  id          bigint PRIMARY KEY,
  buyer_id    bigint NOT NULL,
  provider_id bigint NOT NULL,
  pool_id     bigint NOT NULL,
  market      text NOT NULL,
  status      text NOT NULL,
  lease       jsonb NOT NULL,            -- the lease as the buyer sees it (role is set per reader)
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX leases_buyer ON leases (buyer_id, id DESC);
CREATE INDEX leases_provider ON leases (provider_id, id DESC);
