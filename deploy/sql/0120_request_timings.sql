-- peakload schema: per request, the connection it was sent on and the server's own timings
-- (loadgen.records.RequestRecord; written by workers/store/copyenc.py, read by analysis/).
--   connect_ns            ns opening a new connection (TCP, TLS) inside the request, on the
--                         measuring host's monotonic clock; NULL: an idle connection was reused
--   resent                re-sends after a reused connection died before any response byte
--   server_prompt_tokens  prompt tokens the server evaluated (after its prefix cache)
--   server_prefill_ms     its time to evaluate them
--   server_decode_tokens  tokens it generated
--   server_decode_ms      its time to generate them (first to last)
--   server_cached_tokens  prompt tokens served from its prefix cache
--   server_queue_ms       its time waiting for a slot before prefill
-- server_* are as the server reported them (ms on the server's clock), NULL where it did not.
-- Rows written before this migration have NULL everywhere here, resent included (not recorded).
--
-- Nullable, no default, one column per statement: on a TimescaleDB hypertable this is a catalog
-- change only, and it is the form TimescaleDB accepts on a hypertable with compression enabled.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS connect_ns bigint;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS resent smallint;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS server_prompt_tokens integer;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS server_prefill_ms double precision;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS server_decode_tokens integer;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS server_decode_ms double precision;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS server_cached_tokens integer;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS server_queue_ms double precision;

-- request_blocks body, format 2 (written from now on; format 1, deploy/sql/0110, is still read:
-- its requests have NULL in the fields below). As format 1 with magic "PLBLOCK2" and F = 25:
-- the int64 section gains, after client_tokens, connect_ns, resent, server_prompt_tokens,
-- server_prefill_ms, server_decode_tokens, server_decode_ms, server_cached_tokens,
-- server_queue_ms. The three *_ms fields hold the IEEE-754 binary64 bits of the value, NULL as
-- a NaN; the others are integers, NULL as -2^63.
