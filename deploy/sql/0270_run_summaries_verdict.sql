-- peakload schema: a finished run's verdict against its own spec (analysis.verdicts.verdict.
-- judge_run, as JSON) kept on its summary's row: `run` and `submit` keep the verdict they exit
-- with, a page the one it computes, and the Run page then reads it instead of judging every
-- request again. Valid under the row's `summary_key` only: a summary stored under a newer key
-- without a verdict clears it. Derived, never measured: NULL loses nothing.
ALTER TABLE run_summaries ADD COLUMN IF NOT EXISTS verdict text;
