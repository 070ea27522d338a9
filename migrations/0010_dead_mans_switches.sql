-- The dead man's switch (API.md, `cancel_on_disconnect`) survives the process that armed it: a row per
-- armed WebSocket connection, written before the server confirms the switch and deleted when the client
-- switches it off or after its cancel committed. Rows left when gpuexd stops or crashes belong to
-- connections that no longer exist; the next start cancels those accounts' open orders before it takes
-- traffic (server/dead_mans_switches.cpp).
CREATE TABLE dead_mans_switches (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id bigint NOT NULL REFERENCES accounts (id),
  armed_at   timestamptz NOT NULL DEFAULT now()
);
