-- peakload schema: per request, the audio of a speech run (loadgen.records.RequestRecord;
-- written by workers/store/copyenc.py, COPY layout 4; read by analysis/store/audioload.py).
--   audio_ms          the audio's decoded length, ms (loadgen/targets/audio.py): speech out,
--                     the response's (from its bytes, not their count); speech in, the upload's
--   audio_bytes       its bytes (speech out: received, after base64 for SSE; in: uploaded)
--   transcript_words  words of the transcript (speech in), whitespace-separated
-- NULL for every other API, where the format does not say, and on rows stored before this.
--
-- request_blocks has no place for them: a writer batch holding a request with audio gets no
-- block, so readers of its run read `requests` (as for chunk_choices, deploy/sql/0190).
--
-- Nullable, no default, one column per statement: on a TimescaleDB hypertable this is a catalog
-- change only, and it is the form TimescaleDB accepts on a hypertable with compression enabled.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS audio_ms double precision;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS audio_bytes bigint;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS transcript_words integer;
