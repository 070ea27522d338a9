-- Accounts and their API keys. A key is shown once, when created; only its SHA-256 is stored.
CREATE TABLE accounts (
  id         bigserial PRIMARY KEY,
  name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  -- The public part of a key ("k_" + 16 hex), used to find it and to revoke it.
  id          text PRIMARY KEY CHECK (id ~ '^k_[0-9a-f]{16}$'),
  account_id  bigint NOT NULL REFERENCES accounts (id),
  key_sha256  bytea NOT NULL CHECK (length(key_sha256) = 32),
  scopes      text[] NOT NULL CHECK (scopes <@ ARRAY['read', 'trade', 'provide', 'admin']::text[]
                                     AND cardinality(scopes) > 0),
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE INDEX api_keys_account ON api_keys (account_id);
