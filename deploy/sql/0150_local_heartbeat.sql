-- peakload schema: the lease of a local run (owned by workers/store/runs.py, workers/local.py).
-- The process running a local run stamps heartbeat_at every few seconds and names itself in
-- `owner` (host:pid); a pending or running local run whose heartbeat is older than its lease
-- had its process die and is marked `failed` by the next command that looks (runs, report,
-- abort, run). Runs created without an owner hold no lease and are never judged by it.
-- Additive only.

ALTER TABLE runs ADD COLUMN IF NOT EXISTS heartbeat_at timestamptz;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner        text;
CREATE INDEX IF NOT EXISTS runs_live_idx ON runs (mode, heartbeat_at)
    WHERE status IN ('pending', 'running');
