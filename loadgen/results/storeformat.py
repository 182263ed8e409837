"""The store's shape, in one place for the writer (workers/store) and the readers (analysis):
the column order of `requests` and `ticks` as the binary COPY writes them, the packed-block
header, and the variable naming the store. deploy/sql/ is the schema these lists follow;
tests/deploy/test_storeformat.py checks them against it."""

from __future__ import annotations

import struct

DATABASE_ENV = "PEAKLOAD_DATABASE_URL"  # the store's URL; unset: the embedded PostgreSQL
# psycopg's `prepare_threshold` for every peakload connection to the store: None, no server-side
# prepared statements, so a transaction-mode pooler such as PgBouncer (which hands each
# transaction any server connection) can stand between a fleet and the database. Nothing else
# peakload keeps past a transaction either: no session SET, no session lock, and the writer's
# TEMP staging tables are made (IF NOT EXISTS) inside the transaction that uses them.
PREPARE_THRESHOLD: None = None

NS_COLUMNS = ("sent_ns", "headers_ns", "first_token_ns", "first_answer_ns", "end_ns")
CONTENT_COLUMNS = ("prompt_text", "response_text")  # NULL unless a run opts in to content
# deploy/sql/0120: NULL on rows stored before it (resent included: not recorded)
CONNECTION_COLUMNS = ("connect_ns", "resent")
SERVER_COLUMNS = (
    "server_prompt_tokens",
    "server_prefill_ms",
    "server_decode_tokens",
    "server_decode_ms",
    "server_cached_tokens",
    "server_queue_ms",
)
REQUEST_COLUMNS = (
    "request_id", "scheduled_at", "run_id", "shard_id", "region", "level", "idx", "phase",
    "attempt", "session_id", "turn", "outcome", "http_status", "error_phase", "error_detail",
    *NS_COLUMNS, "prompt_tokens", "max_tokens", "output_tokens", "reasoning_tokens",
    "usage_prompt_tokens", "usage_completion_tokens", "client_tokens", "token_source",
    "chunk_offsets_us", "chunk_tokens", "retry_after_s", *CONTENT_COLUMNS,
    *CONNECTION_COLUMNS, *SERVER_COLUMNS, "chunk_choices", *("audio_ms", "audio_bytes",
    "transcript_words"), "adapter", "shared_prefix_tokens",
)  # fmt: skip
"""`requests` as the writer's COPY orders it (new columns are only ever appended)."""
REQUESTS_LAYOUT = 5  # the layout the writer writes
# the columns of each layout a payload (a spooled one included) may have: an older payload
# COPYs into its leading columns, the rest left NULL
REQUEST_LAYOUTS = {
    1: REQUEST_COLUMNS[:33],
    2: REQUEST_COLUMNS[:41],
    3: REQUEST_COLUMNS[:42],
    4: REQUEST_COLUMNS[:45],
    5: REQUEST_COLUMNS,
}
# deploy/sql/0190: per chunk its choice of `n > 1` (loadgen/results/choices.py); NULL when every
# chunk is choice 0 (n = 1) and on rows stored before it. A batch holding one is not packed into
# request_blocks (their format has no place for it): readers of its run read `requests`.
CHOICE_COLUMN = "chunk_choices"
# deploy/sql/0210: a speech run's audio (length, bytes, transcript words); NULL for other APIs.
# A batch holding one is not packed into request_blocks either: readers of its run read
# `requests` (analysis/store/audioload.py).
AUDIO_COLUMNS = ("audio_ms", "audio_bytes", "transcript_words")  # nullable; readers: float64
# deploy/sql/0220: the LoRA adapter a request asked for ([[workload.adapters]]) and the shared
# prefix tokens planned into its prompt (0: a compare_prefix request without it); NULL when the
# workload names none, and on rows stored before it. Blocks do not carry them: every reader
# takes them from `requests` (analysis/store/workloadload.py).
WORKLOAD_COLUMNS = ("adapter", "shared_prefix_tokens")
READ_COLUMNS = tuple(c for c in REQUEST_COLUMNS if c not in CONTENT_COLUMNS)
"""What the readers load of a request (content is read only on request)."""

NULLABLE_INT_COLUMNS = (
    *NS_COLUMNS, "http_status", "session_id", "turn", "prompt_tokens", "max_tokens",
    "usage_prompt_tokens", "usage_completion_tokens", *CONNECTION_COLUMNS,
    "server_prompt_tokens", "server_decode_tokens", "server_cached_tokens",
    "shared_prefix_tokens",
)  # fmt: skip
"""Integer columns that may be NULL: readers hold them as float64 (NaN for NULL), exports as
nullable integers."""
NULLABLE_REAL_COLUMNS = (
    "retry_after_s",
    "server_prefill_ms",
    "server_decode_ms",
    "server_queue_ms",
)
"""Real-valued columns that may be NULL (float64, NaN for NULL)."""

TICK_COLUMNS = (
    "t", "run_id", "shard_id", "region", "level", "in_flight", "started", "completed", "errors",
    "output_tokens", "loop_lag_ms_max", "loop_lag_ms_p99", "dispatch_delay_ms_max",
    "cpu_percent", "rss_bytes",
)  # fmt: skip

# request_blocks (deploy/sql/0110, 0120): one writer batch packed column by column
BLOCK_COLUMNS = ("run_id", "block_id", "scheduled_at", "format", "n_requests", "n_chunks", "body")
BLOCK_FORMAT = 2  # the format the writer writes
BLOCK_MAGIC = {1: b"PLBLOCK1", 2: b"PLBLOCK2"}
BLOCK_SCALARS = {1: 17, 2: 25}  # int64 fields per request in each format
BLOCK_CODED = 6  # dictionary-coded text fields per request
BLOCK_HEAD = struct.Struct("<8sIQI")  # magic, requests, chunks, dictionary bytes
BLOCK_NULL = -(2**63)  # an int64 field's NULL
BLOCK_FLOAT_FIELDS = frozenset((20, 22, 24))  # format 2's fields holding float64 bits (NULL: NaN)
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01T00:00:00Z in µs since the Unix epoch
