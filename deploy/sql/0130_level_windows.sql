-- peakload schema: what a level measured, as run (owned by workers/store/runs.py, read by
-- analysis/load.py). steady_start/steady_end: the wall-clock window every throughput divides
-- by (for several shards the span in which all were in their steady phase; for a stopped run
-- cut at the stop); drained_at: when the level's last request ended before the next began;
-- between_levels: drain | cancel | overlap; search: the saturation search's decision for this
-- level ({"decision", "n", "exceedances", ...} per SLO). runs.search: the search's answer.
ALTER TABLE run_levels ADD COLUMN IF NOT EXISTS steady_start   timestamptz;
ALTER TABLE run_levels ADD COLUMN IF NOT EXISTS steady_end     timestamptz;
ALTER TABLE run_levels ADD COLUMN IF NOT EXISTS drained_at     timestamptz;
ALTER TABLE run_levels ADD COLUMN IF NOT EXISTS between_levels text;
ALTER TABLE run_levels ADD COLUMN IF NOT EXISTS search         jsonb;
ALTER TABLE runs       ADD COLUMN IF NOT EXISTS search         jsonb;
