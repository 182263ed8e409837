"""Rows of `request_blocks` (deploy/sql/0110_request_blocks.sql specifies the body, and
0120_request_timings.sql its format 2, written here): one writer batch of one run, packed column
by column, as a binary COPY payload written in the same transaction as the batch's `requests`
rows.
"""

# The scalar and text values are those the `requests` COPY stores (copyenc), so a reader of the
# blocks gets what it would read from `requests`: the same NUL replacement in error texts, and
# scheduled_at truncated to whole µs as a timestamptz column keeps it.

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from loadgen.results.records import RequestRecord
from loadgen.results.storeformat import (
    BLOCK_CODED,
    BLOCK_COLUMNS,
    BLOCK_FLOAT_FIELDS,
    BLOCK_FORMAT,
    BLOCK_HEAD,
    BLOCK_MAGIC,
    BLOCK_NULL,
    BLOCK_SCALARS,
    PG_EPOCH_US,
)

FORMAT = BLOCK_FORMAT
MAGIC = BLOCK_MAGIC[FORMAT]
HEAD = BLOCK_HEAD
NULL = BLOCK_NULL
_PG_EPOCH_US = PG_EPOCH_US


def _free(value: str | None) -> str | None:
    return value.replace("\x00", "\ufffd") if value is not None and "\x00" in value else value


def _scheduled_us(r: RequestRecord) -> int:
    return r.scheduled_at_ns // 1000


# int64 fields in body order: (getter, nullable)
_SCALARS: tuple[tuple[Callable[[RequestRecord], Any], bool], ...] = (
    (_scheduled_us, False),
    (attrgetter("level"), False),
    (attrgetter("index"), False),
    (attrgetter("attempt"), False),
    (attrgetter("sent_ns"), True),
    (attrgetter("headers_ns"), True),
    (attrgetter("first_token_ns"), True),
    (attrgetter("first_answer_ns"), True),
    (attrgetter("end_ns"), True),
    (attrgetter("http_status"), True),
    (attrgetter("prompt_tokens"), True),
    (attrgetter("max_tokens"), True),
    (attrgetter("output_tokens"), False),
    (attrgetter("reasoning_tokens"), False),
    (attrgetter("usage_prompt_tokens"), True),
    (attrgetter("usage_completion_tokens"), True),
    (attrgetter("client_tokens"), False),
    # format 2
    (attrgetter("connect_ns"), True),
    (attrgetter("resent"), True),  # None only when packing rows stored without it (backfill)
    (attrgetter("server_prompt_tokens"), True),
    (attrgetter("server_prefill_ms"), True),
    (attrgetter("server_decode_tokens"), True),
    (attrgetter("server_decode_ms"), True),
    (attrgetter("server_cached_tokens"), True),
    (attrgetter("server_queue_ms"), True),
)
# fields holding float64 bits (NULL: NaN) instead of integers
FLOAT_FIELDS = BLOCK_FLOAT_FIELDS
# the server_* fields: all NULL for most APIs, filled in one step then
_SERVER_FIELDS = range(19, 25)
_CODED: tuple[Callable[[RequestRecord], str | None], ...] = (
    attrgetter("region"),
    attrgetter("shard_id"),
    lambda r: r.phase.value,
    lambda r: r.outcome.value,
    lambda r: _free(r.error_phase),
    lambda r: r.token_source.value,
)
N_SCALARS, N_CODED = len(_SCALARS), len(_CODED)
assert (BLOCK_SCALARS[FORMAT], BLOCK_CODED) == (N_SCALARS, N_CODED), (
    "see loadgen.results.storeformat"
)


def body(
    records: Sequence[RequestRecord], offsets: np.ndarray, tokens: np.ndarray, lengths: np.ndarray
) -> tuple[bytes, bytes]:
    """(body, request ids) of one block: `offsets` and `tokens` are the records' chunk arrays
    concatenated (any integer dtype; the caller has checked their ranges), `lengths` their
    sizes per record."""
    n = len(records)
    scalars = np.empty((N_SCALARS, n), dtype="<i8")
    server = _has_server_timings(records)
    for f, (get, nullable) in enumerate(_SCALARS):
        if f in _SERVER_FIELDS and not server:
            scalars[f] = _NAN_BITS if f in FLOAT_FIELDS else NULL
        elif f in FLOAT_FIELDS:
            values = [np.nan if (v := get(r)) is None else v for r in records]
            scalars[f] = np.array(values, dtype="<f8").view("<i8")
        elif nullable:
            scalars[f] = [NULL if (v := get(r)) is None else v for r in records]
        else:
            scalars[f] = [get(r) for r in records]
    ids = b"".join(bytes.fromhex(r.request_id.replace("-", "")) for r in records)
    codes = np.empty((N_CODED, n), dtype="<i2")
    dictionary: list[list[str]] = []
    for f, get in enumerate(_CODED):
        seen: dict[str, int] = {}
        codes[f] = [-1 if (v := get(r)) is None else seen.setdefault(v, len(seen)) for r in records]
        dictionary.append(list(seen))
    text = json.dumps(dictionary, ensure_ascii=False).encode()
    return b"".join((
        HEAD.pack(MAGIC, n, offsets.size, len(text)),
        scalars.tobytes(),
        ids,
        offsets.astype("<i4").tobytes(),
        lengths.astype("<i4").tobytes(),
        codes.tobytes(),
        tokens.astype("<i2").tobytes(),
        text,
    )), ids  # fmt: skip


_NAN_BITS = int(np.array([np.nan], dtype="<f8").view("<i8")[0])


def _has_server_timings(records: Sequence[RequestRecord]) -> bool:
    """Whether any record carries a server_* value (checked on prefill, decode and prompt
    counts first: a server that reports any reports those)."""
    return any(
        r.server_prefill_ms is not None
        or r.server_decode_ms is not None
        or r.server_prompt_tokens is not None
        or r.server_decode_tokens is not None
        or r.server_cached_tokens is not None
        or r.server_queue_ms is not None
        for r in records
    )


_ROW = struct.Struct(">hi16si16siqihiiiqi")  # fields, then (length, value) pairs up to body


def encode_blocks(
    records: Sequence[RequestRecord], offsets: np.ndarray, tokens: np.ndarray, lengths: np.ndarray
) -> bytes:
    """Binary COPY tuples (no header or trailer) of `request_blocks`, one per run among
    `records` (a writer serves one run, so normally one)."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    by_run: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_run.setdefault(r.run_id, []).append(i)
    out = []
    for run_id, rows in by_run.items():
        if len(rows) == len(records):
            recs, off, tok, lens = records, offsets, tokens, lengths
        else:
            recs = [records[i] for i in rows]
            idx = np.concatenate([np.arange(starts[i], ends[i]) for i in rows])
            off, tok, lens = offsets[idx], tokens[idx], lengths[rows]
        data, ids = body(recs, off, tok, lens)
        first_us = min(r.scheduled_at_ns for r in recs) // 1000 - _PG_EPOCH_US
        block_id = hashlib.sha256(ids).digest()[:16]
        out.append(
            _ROW.pack(
                len(BLOCK_COLUMNS),
                16,
                bytes.fromhex(run_id.replace("-", "")),
                16,
                block_id,
                8,
                first_us,
                2,
                FORMAT,
                4,
                len(recs),
                8,
                int(off.size),
                len(data),
            )
            + data
        )
    return b"".join(out)
