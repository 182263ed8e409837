"""Loading a large run fast: one `COPY (SELECT …) TO STDOUT (FORMAT BINARY)` whose rows are
fixed-width scalars (text columns as dictionary codes, NULLs as a sentinel) followed by the two
chunk arrays, parsed with numpy block by block. Gives the same frame as
analysis.load.load_requests (without ids, error text or content) plus flat `ChunkArrays`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql

from analysis.metrics import ChunkArrays

NULL = -(2**63)  # sentinel for SQL NULL in int8 fields
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = len(_SIGNATURE) + 8  # signature, flags, header extension length (0)
_CODED = ("region", "shard_id", "phase", "outcome", "error_phase", "token_source")
# (name, SQL expression, nullable); every field is sent as int8
_SCALARS: tuple[tuple[str, str, bool], ...] = (
    ("n_chunks", "cardinality(chunk_offsets_us)", False),
    ("scheduled_us", "(extract(epoch FROM scheduled_at) * 1000000)::int8", False),
    ("level", "level", False),
    ("idx", "idx", False),
    ("attempt", "attempt", False),
    ("sent_ns", "sent_ns", True),
    ("headers_ns", "headers_ns", True),
    ("first_token_ns", "first_token_ns", True),
    ("first_answer_ns", "first_answer_ns", True),
    ("end_ns", "end_ns", True),
    ("http_status", "http_status", True),
    ("prompt_tokens", "prompt_tokens", True),
    ("max_tokens", "max_tokens", True),
    ("output_tokens", "output_tokens", False),
    ("reasoning_tokens", "reasoning_tokens", False),
    ("usage_prompt_tokens", "usage_prompt_tokens", True),
    ("usage_completion_tokens", "usage_completion_tokens", True),
    ("client_tokens", "client_tokens", False),
)
_FIELD = 12  # int32 length + int8 value
_N_FIELDS = len(_SCALARS) + len(_CODED) + 2
_FIXED = 2 + _FIELD * (len(_SCALARS) + len(_CODED))  # field count + fixed-width fields
_BLOCK_BYTES = 64 << 20


def _dictionaries(conn: psycopg.Connection[Any], run_id: str) -> dict[str, list[str | None]]:
    aggs = sql.SQL(", ").join(
        sql.SQL("array_agg(DISTINCT {c})").format(c=sql.Identifier(c)) for c in _CODED
    )
    with conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT {} FROM requests WHERE run_id = %s").format(aggs), (run_id,))
        row = cur.fetchone()
    assert row is not None
    return {c: list(v or []) for c, v in zip(_CODED, row, strict=True)}


def _array_bytes(n: np.ndarray, elem: int) -> np.ndarray:
    """Bytes of a 1-D binary array value with n elements of `elem` bytes (0-D when empty)."""
    return np.where(n > 0, 20 + (4 + elem) * n, 12)


def _row_starts(buf: memoryview, start: int, end: int) -> tuple[list[int], int]:
    """Start offsets of the complete rows in buf[start:end]; returns them and the first
    offset not consumed (a partial row or the trailer)."""
    starts: list[int] = []
    p = start
    frombytes = int.from_bytes
    while p + _FIXED <= end:
        if frombytes(buf[p : p + 2], "big", signed=True) == -1:
            break  # trailer
        n = frombytes(buf[p + 6 : p + 14], "big")  # n_chunks: the first field
        size = _FIXED + 8 + (20 + 8 * n if n else 12) + (20 + 6 * n if n else 12)
        if p + size > end:
            break
        starts.append(p)
        p += size
    return starts, p


def _values(raw: np.ndarray, pos: np.ndarray, dtype: str) -> np.ndarray:
    """Big-endian integers of `dtype` ('>i8', '>i4', '>i2') starting at byte positions `pos`:
    one gather per value, through a view of `raw` for each alignment class of `pos`."""
    width = np.dtype(dtype).itemsize
    out = np.empty(pos.size, dtype=dtype)
    align = pos % width
    for a in np.unique(align).tolist():
        words = raw[a : a + (raw.size - a) // width * width].view(dtype)
        sel = align == a
        out[sel] = words[(pos[sel] - a) // width]
    return out


def _parse_block(
    raw: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scalars (rows, fields) int64, n per row, offsets int32 and tokens int16 (flat)."""
    nf = len(_SCALARS) + len(_CODED)
    fields = np.empty((starts.size, nf), dtype=np.int64)
    for f in range(nf):
        fields[:, f] = _values(raw, starts + 2 + f * _FIELD + 4, ">i8")
    n = fields[:, 0]
    off_arr = starts + _FIXED + 4  # the offsets array value starts after its length
    tok_arr = off_arr + _array_bytes(n, 4) + 4
    total = int(n.sum())
    if total == 0:
        return fields, n, np.zeros(0, np.int32), np.zeros(0, np.int16)
    within = np.arange(total, dtype=np.int64)
    within -= np.repeat(np.cumsum(n) - n, n)
    off_pos = np.repeat(off_arr + 24, n) + 8 * within  # header 20, element length 4
    tok_pos = np.repeat(tok_arr + 24, n) + 6 * within
    return (
        fields,
        n,
        _values(raw, off_pos, ">i4").astype(np.int32),
        _values(raw, tok_pos, ">i2").astype(np.int16),
    )


def load_requests_fast(
    conn: psycopg.Connection[Any], run_id: str
) -> tuple[pd.DataFrame, ChunkArrays]:
    """One run's requests as (frame, chunks): the columns of load_requests except request_id,
    error_detail, session/turn, retry_after and content; arrays only in `chunks` (offsets µs
    from send, int32; tokens int16). Row order is the store's (not sorted)."""
    dicts = _dictionaries(conn, run_id)
    exprs: list[sql.Composable] = [
        sql.SQL("COALESCE(({e})::int8, {null})").format(e=sql.SQL(e), null=sql.Literal(NULL))
        if nullable
        else sql.SQL("({e})::int8").format(e=sql.SQL(e))
        for _, e, nullable in _SCALARS
    ]
    for c in _CODED:  # 0-based code; -1 for NULL
        values = [v for v in dicts[c] if v is not None]
        exprs.append(
            sql.SQL("COALESCE(array_position({d}::text[], {c})::int8 - 1, -1)").format(
                d=sql.Literal(values), c=sql.Identifier(c)
            )
        )
    exprs += [sql.Identifier("chunk_offsets_us"), sql.Identifier("chunk_tokens")]
    query = sql.SQL(
        "COPY (SELECT {} FROM requests WHERE run_id = {}::uuid) TO STDOUT (FORMAT BINARY)"
    ).format(sql.SQL(", ").join(exprs), sql.Literal(run_id))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    pending = bytearray()
    first = True
    with conn.cursor() as cur, cur.copy(query) as cp:
        for data in cp:
            pending += data
            if len(pending) >= _BLOCK_BYTES:
                first = _consume(pending, parts, first)
    _consume(pending, parts, first, final=True)
    return _assemble(parts, dicts)


def _consume(
    pending: bytearray,
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    first: bool,
    *,
    final: bool = False,
) -> bool:
    start = 0
    if first:
        if bytes(pending[: len(_SIGNATURE)]) != _SIGNATURE:
            raise ValueError("not a PostgreSQL binary COPY stream")
        start = _HEADER
    view = memoryview(pending)
    starts, end = _row_starts(view, start, len(pending))
    if starts:
        raw = np.frombuffer(view[:end], dtype=np.uint8)
        parts.append(_parse_block(raw, np.asarray(starts, dtype=np.int64)))
        del raw
    view.release()
    if final and len(pending) - end not in (0, 2):
        raise ValueError(f"binary COPY ended inside a row ({len(pending) - end} bytes left)")
    del pending[:end]
    return False


def _assemble(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    dicts: dict[str, list[str | None]],
) -> tuple[pd.DataFrame, ChunkArrays]:
    nf = len(_SCALARS) + len(_CODED)
    fields = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, nf), np.int64)
    n = fields[:, 0]
    ptr = np.zeros(n.size + 1, dtype=np.int64)
    np.cumsum(n, out=ptr[1:])
    chunks = ChunkArrays(
        offsets_us=np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int32),
        tokens=np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, np.int16),
        ptr=ptr,
    )
    df = pd.DataFrame(index=pd.RangeIndex(n.size))
    for i, (name, _, nullable) in enumerate(_SCALARS):
        col = fields[:, i]
        if name == "scheduled_us":
            df["scheduled_at"] = pd.to_datetime(col * 1000, utc=True)
        elif nullable:
            df[name] = np.where(col == NULL, np.nan, col.astype(np.float64))
        else:
            df[name] = col
    for j, c in enumerate(_CODED):
        codes = fields[:, len(_SCALARS) + j]
        values = [v for v in dicts[c] if v is not None]
        df[c] = (
            pd.Categorical.from_codes(
                np.asarray(codes, dtype=np.int64), categories=pd.Index(values)
            )
            if values
            else None
        )
    return df, chunks
