-- peakload schema: a partial index of the requests that carry workload columns (0220), so every
-- loader (analysis/store/workloadload.py) finds a run's few such rows from the index instead of
-- reading every row of the table's chunk: on a run without adapters or a shared prefix that read
-- was a scan of each run stored in the same time chunk. Only rows with a workload column enter
-- it, so ingest of other requests is unchanged.
CREATE INDEX IF NOT EXISTS requests_workload_idx ON requests (run_id)
    WHERE adapter IS NOT NULL OR shared_prefix_tokens IS NOT NULL;
