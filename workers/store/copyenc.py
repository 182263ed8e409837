"""PostgreSQL binary COPY payloads for `requests` and `ticks`, built directly from records, in
the column order `REQUEST_COLUMNS` / `TICK_COLUMNS`. The bytes are also the spool format; a
spooled payload of an older layout names its own columns (`REQUEST_LAYOUTS`).
"""

# Building the payload ourselves instead of psycopg's per-value adapters is 2-4x cheaper per row
# on this hot path (bench/RESULTS.md), and a replay COPYs exactly what the first attempt sent.

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable

import numpy as np

from loadgen.results.records import RequestRecord, Tick
from loadgen.results.storeformat import (
    PG_EPOCH_US,
    REQUEST_COLUMNS,
    REQUEST_LAYOUTS,
    REQUESTS_LAYOUT,
    TICK_COLUMNS,
)
from workers.store import blocks as block_rows

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
__all__ = ["REQUESTS_LAYOUT", "REQUEST_COLUMNS", "REQUEST_LAYOUTS", "TICK_COLUMNS"]
_INT4_OID, _INT2_OID = 23, 21

_NULL = struct.pack(">i", -1)
_I16 = struct.Struct(">ih")  # (2, value)
_I32 = struct.Struct(">ii")  # (4, value)
_I64 = struct.Struct(">iq")  # (8, value)
_F32 = struct.Struct(">if")  # (4, value)
_F64 = struct.Struct(">id")  # (8, value)
_LEN = struct.Struct(">i")
_NFIELDS_REQ = struct.pack(">h", len(REQUEST_COLUMNS))
_NFIELDS_TICK = struct.pack(">h", len(TICK_COLUMNS))
_UUID_LEN = struct.pack(">i", 16)
_ARRAY_HEAD = struct.Struct(">iiiiii")  # (field len, ndim=1, has_null=0, oid, n, lbound=1)
_EMPTY_INT4 = struct.pack(">iiii", 12, 0, 0, _INT4_OID)
_EMPTY_INT2 = struct.pack(">iiii", 12, 0, 0, _INT2_OID)
_TIMES = struct.Struct(">iqiqiqiqiq")  # sent, headers, first_token, first_answer, end (all set)
_NO_SERVER = _NULL * 6  # the server reported no timings (most APIs)
_RESENT = [struct.pack(">ih", 2, k) for k in range(4)]  # 0 nearly always, at most a few
_TAIL_REUSED = _NULL + _RESENT[0] + _NO_SERVER
# Array elements as (length, value) pairs, big-endian: numpy fills them ~3x faster than struct.
_ELEM_I4 = np.dtype([("n", ">i4"), ("v", ">i4")])
_ELEM_I2 = np.dtype([("n", ">i4"), ("v", ">i2")])
_SHORT_TEXT: dict[str, bytes] = {}  # ids, shard/region names and enum values repeat per batch
_SHORT_TEXT_MAX = 4096


class EncodeError(ValueError):
    """A record that cannot be stored as it is (a bug upstream, not an outage)."""


def _uuid(value: str) -> bytes:
    raw = bytes.fromhex(value.replace("-", ""))
    if len(raw) != 16:
        raise EncodeError(f"not a UUID: {value!r}")
    return _UUID_LEN + raw


def _short(value: str, uuid: bool = False) -> bytes:
    """A repeated short text (or a run's UUID) field, encoded once."""
    enc = _SHORT_TEXT.get(value)
    if enc is None:
        if len(_SHORT_TEXT) >= _SHORT_TEXT_MAX:
            _SHORT_TEXT.clear()
        enc = _SHORT_TEXT[value] = _uuid(value) if uuid else _text(value)
    return enc


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _LEN.pack(len(raw)) + raw


def _free_text(value: str | None) -> bytes:
    """Text from outside (server messages, prompts): PostgreSQL text cannot hold NUL."""
    if value is None:
        return _NULL
    return _text(value.replace("\x00", "\ufffd") if "\x00" in value else value)


def _int4_or_null(value: int | None) -> bytes:
    return _NULL if value is None else _I32.pack(4, value)


def _int8_or_null(value: int | None) -> bytes:
    return _NULL if value is None else _I64.pack(8, value)


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Every list's values concatenated (int64) and each list's length."""
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    total = int(lens.sum())
    return np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=total), lens


def _arrays(
    flat: np.ndarray, lens: np.ndarray, elem: np.dtype[np.void], width: int, oid: int, empty: bytes
) -> list[bytes]:
    """Binary array fields for a whole batch at once (`_flat`'s output): one numpy pass over
    every element (the per-row cost would otherwise dominate), then one slice per row."""
    total = flat.size
    lo, hi = (-(2**31), 2**31 - 1) if width == 4 else (-(2**15), 2**15 - 1)
    if total and (int(flat.min()) < lo or int(flat.max()) > hi):
        bad_elem = int(np.flatnonzero((flat < lo) | (flat > hi))[0])
        bad = int(np.searchsorted(np.cumsum(lens), bad_elem, side="right"))
        raise EncodeError(f"row {bad}: an array value does not fit {width * 8}-bit integers")
    elems = np.empty(total, elem)
    elems["n"] = width
    elems["v"] = flat
    blob = elems.tobytes()
    step = 4 + width
    out: list[bytes] = []
    pos = 0
    for n in lens.tolist():
        if n == 0:
            out.append(empty)
            continue
        head = _ARRAY_HEAD.pack(20 + step * n, 1, 0, oid, n, 1)
        out.append(head + blob[pos : pos + step * n])
        pos += step * n
    return out


def _choices(r: RequestRecord) -> bytes:
    """The chunk_choices column (deploy/sql/0190): NULL when every chunk is choice 0."""
    c = r.chunk_choices
    if not c:
        return _NULL
    if len(c) != len(r.chunk_offsets_us):
        raise ValueError("chunk_choices and chunk_offsets_us differ in length")
    flat, lens = _flat([c])
    return _arrays(flat, lens, _ELEM_I2, 2, _INT2_OID, _EMPTY_INT2)[0]


_WORKLOAD_NULLS = _NULL * 2


def _workload(r: RequestRecord) -> bytes:
    """The columns of deploy/sql/0220: adapter, shared_prefix_tokens."""
    adapter = _NULL if r.adapter is None else _short(r.adapter)
    return adapter + _int4_or_null(r.shared_prefix_tokens)


def _float8_or_null(value: float | None) -> bytes:
    return _NULL if value is None else _F64.pack(8, value)


_NO_AUDIO = _NULL * 3


def _audio(r: RequestRecord) -> bytes:
    """The columns of deploy/sql/0210 (a speech run's audio); NULL for every other API."""
    ms, n, w = r.audio_ms, r.audio_bytes, r.transcript_words
    if ms is None and n is None and w is None:
        return _NO_AUDIO
    return _float8_or_null(ms) + _int8_or_null(n) + _int4_or_null(w)


def _tail(r: RequestRecord) -> bytes:
    """The columns of deploy/sql/0120: connect_ns, resent, then the server_* ones. One
    constant for the usual case: a reused connection, no re-send, no server timings."""
    c, k = r.connect_ns, r.resent
    pt, pm, dt, dm = (
        r.server_prompt_tokens,
        r.server_prefill_ms,
        r.server_decode_tokens,
        r.server_decode_ms,
    )
    ct, qm = r.server_cached_tokens, r.server_queue_ms
    if pt is None and pm is None and dt is None and dm is None and ct is None and qm is None:
        if c is None and k == 0:
            return _TAIL_REUSED
        server = _NO_SERVER
    else:
        server = b"".join((
            _int4_or_null(pt),
            _float8_or_null(pm),
            _int4_or_null(dt),
            _float8_or_null(dm),
            _int4_or_null(ct),
            _float8_or_null(qm),
        ))  # fmt: skip
    return (
        (_NULL if c is None else _I64.pack(8, c))
        + (_RESENT[k] if 0 <= k < 4 else _I16.pack(2, k))
        + server
    )


def _times(r: RequestRecord) -> bytes:
    s, h, f, a, e = r.sent_ns, r.headers_ns, r.first_token_ns, r.first_answer_ns, r.end_ns
    if s is not None and h is not None and f is not None and a is not None and e is not None:
        return _TIMES.pack(8, s, 8, h, 8, f, 8, a, 8, e)
    return b"".join(map(_int8_or_null, (s, h, f, a, e)))


def encode_request(
    r: RequestRecord, store_content: bool, offsets_field: bytes, tokens_field: bytes
) -> bytes:
    """One `requests` tuple (binary COPY), its two array fields already encoded (`_arrays`).
    Content columns are NULL unless `store_content`."""
    return b"".join((
        _NFIELDS_REQ,
        _uuid(r.request_id),
        _I64.pack(8, r.scheduled_at_ns // 1000 - PG_EPOCH_US),
        _short(r.run_id, uuid=True),
        _short(r.shard_id),
        _short(r.region),
        _I32.pack(4, r.level),
        _I64.pack(8, r.index),
        _short(r.phase.value),
        _I16.pack(2, r.attempt),
        _int4_or_null(r.session_id),
        _int4_or_null(r.turn),
        _short(r.outcome.value),
        _NULL if r.http_status is None else _I16.pack(2, r.http_status),
        _free_text(r.error_phase),
        _free_text(r.error_detail),
        _times(r),
        _int4_or_null(r.prompt_tokens),
        _int4_or_null(r.max_tokens),
        _I32.pack(4, r.output_tokens),
        _I32.pack(4, r.reasoning_tokens),
        _int4_or_null(r.usage_prompt_tokens),
        _int4_or_null(r.usage_completion_tokens),
        _I32.pack(4, r.client_tokens),
        _short(r.token_source.value),
        offsets_field,
        tokens_field,
        _NULL if r.retry_after_s is None else _F32.pack(4, r.retry_after_s),
        _free_text(r.prompt_text) if store_content else _NULL,
        _free_text(r.response_text) if store_content else _NULL,
        _tail(r),
        _choices(r),
        _audio(r),
        _WORKLOAD_NULLS if r.adapter is None and r.shared_prefix_tokens is None else _workload(r),
    ))  # fmt: skip


def encode_tick(t: Tick) -> bytes:
    """One `ticks` tuple (binary COPY)."""
    return b"".join((
        _NFIELDS_TICK,
        _I64.pack(8, t.t_ns // 1000 - PG_EPOCH_US),
        _short(t.run_id, uuid=True),
        _short(t.shard_id),
        _short(t.region),
        _I32.pack(4, t.level),
        _I32.pack(4, t.in_flight),
        _I32.pack(4, t.started),
        _I32.pack(4, t.completed),
        _I32.pack(4, t.errors),
        _I64.pack(8, t.output_tokens),
        _F32.pack(4, t.loop_lag_ms_max),
        _F32.pack(4, t.loop_lag_ms_p99),
        _F32.pack(4, t.dispatch_delay_ms_max),
        _F32.pack(4, t.cpu_percent),
        _I64.pack(8, t.rss_bytes),
    ))  # fmt: skip


def encode_requests(records: Iterable[RequestRecord], store_content: bool) -> bytes:
    """A complete binary COPY payload (header, tuples, trailer); raises EncodeError naming the
    first record that cannot be encoded."""
    return encode_batch(list(records), store_content, blocks=False)[0]


def encode_batch(
    records: list[RequestRecord], store_content: bool, *, blocks: bool = True
) -> tuple[bytes, bytes]:
    """Binary COPY payloads of `requests` and (with `blocks`, else b"") `request_blocks`
    (workers/store/blocks.py) for the same records; raises EncodeError naming the first record
    that cannot be encoded."""
    try:
        off_flat, off_lens = _flat([r.chunk_offsets_us for r in records])
        tok_flat, tok_lens = _flat([r.chunk_tokens for r in records])
        offsets = _arrays(off_flat, off_lens, _ELEM_I4, 4, _INT4_OID, _EMPTY_INT4)
        tokens = _arrays(tok_flat, tok_lens, _ELEM_I2, 2, _INT2_OID, _EMPTY_INT2)
    except (TypeError, ValueError, OverflowError) as e:
        raise EncodeError(f"chunk arrays: {e}") from e
    parts = [HEADER]
    for r, off, tok in zip(records, offsets, tokens, strict=True):
        try:
            parts.append(encode_request(r, store_content, off, tok))
        except (struct.error, ValueError, OverflowError, AttributeError, TypeError) as e:
            raise EncodeError(f"request {r.request_id!r} (index {r.index}): {e}") from e
    parts.append(TRAILER)
    packed = b""
    # a record whose two arrays differ in length is stored as it is, but cannot be packed: its
    # batch gets no block, and readers of its run fall back to `requests`; so does a batch with
    # a request of `n > 1` choices (blocks have no place for chunk_choices, deploy/sql/0190)
    choices = any(r.chunk_choices for r in records)
    # nor one with a speech request's audio (blocks have no place for it, deploy/sql/0210)
    audio = any(r.audio_ms is not None or r.audio_bytes is not None for r in records)
    if blocks and records and not choices and not audio and np.array_equal(off_lens, tok_lens):
        try:
            packed = HEADER + block_rows.encode_blocks(records, off_flat, tok_flat, off_lens)
        except (struct.error, ValueError, OverflowError, AttributeError, TypeError) as e:
            raise EncodeError(f"packed block: {e}") from e
        packed += TRAILER
    return b"".join(parts), packed


def encode_ticks(ticks: Iterable[Tick]) -> bytes:
    parts = [HEADER]
    for t in ticks:
        try:
            parts.append(encode_tick(t))
        except (struct.error, ValueError, OverflowError, AttributeError, TypeError) as e:
            raise EncodeError(f"tick {t.shard_id}@{t.t_ns}: {e}") from e
    parts.append(TRAILER)
    return b"".join(parts)
