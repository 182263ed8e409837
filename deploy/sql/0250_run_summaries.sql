-- peakload schema: a finished run's level summary (analysis.reports.summary.level_summary), kept
-- so that a page or report that needs it reads one row instead of recomputing it from every
-- request. Written by analysis/store/summaries.py when `run` or `submit` summarize a run at its
-- end, or when a page first computes it. `summary_key` names what it was computed from: the
-- run's status, end and row count, and the analysis code and library versions; a reader with
-- another key ignores the row and computes afresh (rows that land later, newer code). Derived,
-- never measured: deleting a row loses nothing.
CREATE TABLE IF NOT EXISTS run_summaries (
    run_id       uuid        PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
    summary_key  text        NOT NULL,
    computed_at  timestamptz NOT NULL DEFAULT now(),
    summary      text        NOT NULL    -- JSON (NaN and Infinity as Python writes them)
);
