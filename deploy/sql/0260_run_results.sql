-- peakload schema: results computed from a finished run (its percentile curves and frontier,
-- analysis/store/derived.py), kept in the store so that the first report or page of the run on
-- any machine reads a small Parquet frame instead of recomputing it from every chunk. Written
-- when `run` or `submit` summarize a run at its end (the report's default parameters), or when
-- a report first computes a result. One row per run, result and parameters: `result_key`
-- names what it was computed from (the run's status, end, row count and last scheduled time,
-- the analysis code and library versions); a reader with another key ignores the row and
-- computes afresh, and its write replaces it. Derived, never measured: deleting a row loses
-- nothing.
CREATE TABLE IF NOT EXISTS run_results (
    run_id       uuid        NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    name         text        NOT NULL,   -- e.g. percentile_curves, frontier_points
    params       text        NOT NULL,   -- a digest of the parameters it was computed with
    result_key   text        NOT NULL,
    computed_at  timestamptz NOT NULL DEFAULT now(),
    frame        bytea       NOT NULL,   -- the result as a Parquet file
    PRIMARY KEY (run_id, name, params)
);
