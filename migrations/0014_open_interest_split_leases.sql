-- Open interest rebuilt from each reserved lease's own trade. 0005 filled it for a database migrated
-- with history by joining a lease to the trade that names it (trades.lease_id), but a lease split
-- off by a preemption keeps its original trade (`trade_id` in its document) while no trade names
-- it, so such a lease was left out and the open interest of its tenor read low from then on. The
-- server's rollups (server/analytics/rollups.cpp) count every reserved lease under the bucket of its
-- own trade, which this rebuild does too, so on a database whose rollups were right it changes
-- nothing (an aggregate row left at zero goes away: a missing row reads as zero).
TRUNCATE reserved_leases, open_interest;
INSERT INTO reserved_leases
SELECT l.id, l.market, t.bucket,
       (l.lease->>'quantity')::numeric * (extract(epoch FROM (l.lease->>'end')::timestamptz) -
                                          extract(epoch FROM (l.lease->>'start')::timestamptz))
FROM leases l JOIN trades t ON t.id = (l.lease->>'trade_id')::bigint WHERE l.status = 'reserved';
INSERT INTO open_interest SELECT market, bucket, sum(gpu_seconds) FROM reserved_leases GROUP BY 1, 2;
