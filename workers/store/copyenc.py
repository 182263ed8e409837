"""PostgreSQL binary COPY payloads for `requests` and `ticks`, built directly from records.

Building the payload ourselves (instead of psycopg's per-value adapters) is the ingest hot path:
it is about 4x cheaper per row, and the bytes are also the spool format, so a replay COPYs
exactly what the failed attempt would have. Column order is `REQUEST_COLUMNS` / `TICK_COLUMNS`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from loadgen.records import RequestRecord, Tick

REQUEST_COLUMNS = (
    "request_id", "scheduled_at", "run_id", "shard_id", "region", "level", "idx", "phase",
    "attempt", "session_id", "turn", "outcome", "http_status", "error_phase", "error_detail",
    "sent_ns", "headers_ns", "first_token_ns", "first_answer_ns", "end_ns", "prompt_tokens",
    "max_tokens", "output_tokens", "reasoning_tokens", "usage_prompt_tokens",
    "usage_completion_tokens", "client_tokens", "token_source", "chunk_offsets_us",
    "chunk_tokens", "retry_after_s", "prompt_text", "response_text",
)  # fmt: skip
TICK_COLUMNS = (
    "t", "run_id", "shard_id", "region", "level", "in_flight", "started", "completed", "errors",
    "output_tokens", "loop_lag_ms_max", "loop_lag_ms_p99", "dispatch_delay_ms_max",
    "cpu_percent", "rss_bytes",
)  # fmt: skip

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01T00:00:00Z in µs since the Unix epoch
_INT4_OID, _INT2_OID = 23, 21

_NULL = struct.pack(">i", -1)
_I16 = struct.Struct(">ih")  # (2, value)
_I32 = struct.Struct(">ii")  # (4, value)
_I64 = struct.Struct(">iq")  # (8, value)
_F32 = struct.Struct(">if")  # (4, value)
_LEN = struct.Struct(">i")
_NFIELDS_REQ = struct.pack(">h", len(REQUEST_COLUMNS))
_NFIELDS_TICK = struct.pack(">h", len(TICK_COLUMNS))
_UUID_LEN = struct.pack(">i", 16)
_ARRAY_HEAD = struct.Struct(">iiiiii")  # (field len, ndim=1, has_null=0, oid, n, lbound=1)
_EMPTY_INT4 = struct.pack(">iiii", 12, 0, 0, _INT4_OID)
_EMPTY_INT2 = struct.pack(">iiii", 12, 0, 0, _INT2_OID)
_PACKERS: dict[tuple[str, int], struct.Struct] = {}


class EncodeError(ValueError):
    """A record that cannot be stored as it is (a bug upstream, not an outage)."""


def _uuid(value: str) -> bytes:
    raw = bytes.fromhex(value.replace("-", ""))
    if len(raw) != 16:
        raise EncodeError(f"not a UUID: {value!r}")
    return _UUID_LEN + raw


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


def _array(values: list[int], code: str, width: int, oid: int, empty: bytes) -> bytes:
    n = len(values)
    if n == 0:
        return empty
    packer = _PACKERS.get((code, n))
    if packer is None:
        packer = _PACKERS[(code, n)] = struct.Struct(">" + ("i" + code) * n)
    flat = [width] * (2 * n)
    flat[1::2] = values
    return _ARRAY_HEAD.pack(20 + (4 + width) * n, 1, 0, oid, n, 1) + packer.pack(*flat)


def encode_request(r: RequestRecord, store_content: bool) -> bytes:
    """One `requests` tuple (binary COPY). Content columns are NULL unless `store_content`."""
    return b"".join((
        _NFIELDS_REQ,
        _uuid(r.request_id),
        _I64.pack(8, r.scheduled_at_ns // 1000 - PG_EPOCH_US),
        _uuid(r.run_id),
        _text(r.shard_id),
        _text(r.region),
        _I32.pack(4, r.level),
        _I64.pack(8, r.index),
        _text(r.phase.value),
        _I16.pack(2, r.attempt),
        _int4_or_null(r.session_id),
        _int4_or_null(r.turn),
        _text(r.outcome.value),
        _NULL if r.http_status is None else _I16.pack(2, r.http_status),
        _free_text(r.error_phase),
        _free_text(r.error_detail),
        _int8_or_null(r.sent_ns),
        _int8_or_null(r.headers_ns),
        _int8_or_null(r.first_token_ns),
        _int8_or_null(r.first_answer_ns),
        _int8_or_null(r.end_ns),
        _int4_or_null(r.prompt_tokens),
        _int4_or_null(r.max_tokens),
        _I32.pack(4, r.output_tokens),
        _I32.pack(4, r.reasoning_tokens),
        _int4_or_null(r.usage_prompt_tokens),
        _int4_or_null(r.usage_completion_tokens),
        _I32.pack(4, r.client_tokens),
        _text(r.token_source.value),
        _array(r.chunk_offsets_us, "i", 4, _INT4_OID, _EMPTY_INT4),
        _array(r.chunk_tokens, "h", 2, _INT2_OID, _EMPTY_INT2),
        _NULL if r.retry_after_s is None else _F32.pack(4, r.retry_after_s),
        _free_text(r.prompt_text) if store_content else _NULL,
        _free_text(r.response_text) if store_content else _NULL,
    ))  # fmt: skip


def encode_tick(t: Tick) -> bytes:
    """One `ticks` tuple (binary COPY)."""
    return b"".join((
        _NFIELDS_TICK,
        _I64.pack(8, t.t_ns // 1000 - PG_EPOCH_US),
        _uuid(t.run_id),
        _text(t.shard_id),
        _text(t.region),
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
    parts = [HEADER]
    for r in records:
        try:
            parts.append(encode_request(r, store_content))
        except (struct.error, ValueError, AttributeError, TypeError) as e:
            raise EncodeError(f"request {r.request_id!r} (index {r.index}): {e}") from e
    parts.append(TRAILER)
    return b"".join(parts)


def encode_ticks(ticks: Iterable[Tick]) -> bytes:
    parts = [HEADER]
    for t in ticks:
        try:
            parts.append(encode_tick(t))
        except (struct.error, ValueError, AttributeError, TypeError) as e:
            raise EncodeError(f"tick {t.shard_id}@{t.t_ns}: {e}") from e
    parts.append(TRAILER)
    return b"".join(parts)
