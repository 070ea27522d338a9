-- Idempotency-Key on POSTs other than orders (API.md): the first answer to a key is kept, written in
-- the same transaction as the command it answered, and replayed to a repeat with the same request.
CREATE TABLE idempotency_keys (
  account_id     bigint NOT NULL REFERENCES accounts (id),
  key            text NOT NULL,
  request_sha256 bytea NOT NULL,
  status         integer NOT NULL,
  body           text NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, key)
);
