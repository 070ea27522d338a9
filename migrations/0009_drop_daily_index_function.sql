-- The writer finishes each touched day of the daily index in its own memory (server/analytics/rollups.cpp,
-- `tail_x20`) since the order-entry work of 2026-11-30; nothing calls gpuex_refresh_daily_index of
-- migration 0006 any more. Dropped so that the trimmed-mean rule has one implementation, not a second one that could
-- drift from it unnoticed. (The index's tests recompute it from raw trades.)
DROP FUNCTION gpuex_refresh_daily_index(text[], bigint[]);
