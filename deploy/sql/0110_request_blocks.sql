-- peakload schema: request_blocks, a packed companion of `requests` written by the store writer
-- (workers/store/blocks.py) in the same transaction as the rows it copies, and read by
-- analysis/packed.py. `requests` keeps every value (its chunk arrays included); a block holds
-- one writer batch of one run again, column by column, so a reader gets a run with one memcpy
-- per block instead of PostgreSQL's per-element array_send. Readers use the blocks of a run only
-- when they cover exactly its rows (counts, ids, first and last scheduled_at), and otherwise
-- read `requests` (runs written before this migration, or data written another way).
--
-- block_id is a digest of the batch's request ids, so a replayed batch maps to the same row
-- (INSERT ... ON CONFLICT DO NOTHING, like the rows). scheduled_at is the batch's earliest.
--
-- body (format 1), all integers little-endian, n = n_requests, c = n_chunks, F = 17, D = 6:
--   header   "PLBLOCK1", uint32 n, uint64 c, uint32 dictionary bytes                  (24 bytes)
--   int64    F x n   per field, one value per request, NULL as -2^63: scheduled_at (µs since
--                    the Unix epoch), level, idx, attempt, sent_ns, headers_ns,
--                    first_token_ns, first_answer_ns, end_ns, http_status, prompt_tokens,
--                    max_tokens, output_tokens, reasoning_tokens, usage_prompt_tokens,
--                    usage_completion_tokens, client_tokens
--   bytes    16 x n  request_id
--   int32    c       chunk_offsets_us of every request, concatenated
--   int32    n       chunks per request (cardinality(chunk_offsets_us))
--   int16    D x n   codes (-1 for NULL) of region, shard_id, phase, outcome, error_phase,
--                    token_source into the dictionary
--   int16    c       chunk_tokens, concatenated
--   utf-8    JSON    the dictionary: D lists of the texts the codes name

CREATE TABLE IF NOT EXISTS request_blocks (
    run_id       uuid        NOT NULL,
    block_id     uuid        NOT NULL,
    scheduled_at timestamptz NOT NULL,
    format       smallint    NOT NULL,
    n_requests   integer     NOT NULL,
    n_chunks     bigint      NOT NULL,
    body         bytea       NOT NULL,
    PRIMARY KEY (run_id, block_id, scheduled_at)
);
-- bodies are read whole and hardly compress (timestamps): kept out of line, uncompressed, so
-- reading one is a copy
ALTER TABLE request_blocks ALTER COLUMN body SET STORAGE EXTERNAL;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb') THEN
        -- a hypertable like `requests`, so a retention policy can drop both alike
        PERFORM create_hypertable('request_blocks', 'scheduled_at',
            chunk_time_interval => interval '1 day', if_not_exists => true, migrate_data => true);
    END IF;
END
$$;
