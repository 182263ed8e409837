-- peakload schema: a partial index of the requests that did not end ok, so a run list
-- (analysis/load.py load_runs) counts a run's errors from the index instead of reading every
-- row of the run. Only failed requests enter it, so ingest of ok requests is unchanged.
CREATE INDEX IF NOT EXISTS requests_errors_idx ON requests (run_id) WHERE outcome <> 'ok';
