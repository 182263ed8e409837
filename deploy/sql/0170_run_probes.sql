-- peakload schema: what `peakload probe` found about the target's handling of the run's own
-- request parameters (honoured / accepted / ignored / rejected / inconclusive, with details),
-- stored with the run before it starts (loadgen.targets.probe; written by workers.store.probes).
CREATE TABLE IF NOT EXISTS run_probes (
    run_id    uuid        PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    probed_at timestamptz NOT NULL,
    target    text        NOT NULL,   -- the URL without credentials
    result    jsonb       NOT NULL    -- ProbeResult.to_dict(): api, model, verdicts
);
