-- Engine snapshots (DESIGN.md §2 recovery): the engine's whole state as of one command, so that a
-- restart restores the latest snapshot and replays only the commands logged after it, instead of the
-- whole log since the first day. The command log stays complete (it is the record); a snapshot is only
-- a shortcut through it, checked by its digest, and written only once every command up to `seq` has
-- committed. The writer keeps the latest two.
CREATE TABLE engine_snapshots (
  seq      bigint PRIMARY KEY,             -- the last command the state includes
  format   integer NOT NULL,               -- of `state`; a gpuexd skips formats it does not know
  digest   text NOT NULL,                  -- the engine's state digest (16 hex digits)
  orders   integer NOT NULL,               -- open orders in it, for operators
  state    text COMPRESSION lz4 NOT NULL,  -- JSON (server/store/snapshots.cpp); lz4 is ~5x faster than pglz
  taken_at timestamptz NOT NULL DEFAULT now()
);
