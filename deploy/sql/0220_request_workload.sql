-- peakload schema: what a request's workload asked of the server's adapters and caches
-- (loadgen.results.records.RequestRecord.adapter / shared_prefix_tokens; written by
-- workers/store/copyenc.py, COPY layout 4; read by analysis/store/workloadload.py for every
-- loader, and by analysis/stats/adapters.py and prefix.py):
--   adapter               text, the LoRA adapter asked for ([[workload.adapters]] name); NULL when
--                         the workload names none, and on rows written before this migration
--   shared_prefix_tokens  integer, the run's shared prefix tokens planned into the prompt (0: a
--                         `compare_prefix` request sent without it); NULL when the workload has
--                         no shared prefix, and on rows written before this migration
--
-- request_blocks do not carry them (readers take them from here, for the few rows that have them).
-- Nullable, no default: on a TimescaleDB hypertable a catalog change only (as 0190).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS adapter text;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS shared_prefix_tokens integer;
