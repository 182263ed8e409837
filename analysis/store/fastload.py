"""Loading a large run fast: one `COPY (SELECT …) TO STDOUT (FORMAT BINARY)` whose rows are
fixed-width scalars (text columns as dictionary codes, NULLs as a sentinel) followed by the two
chunk arrays, parsed with numpy block by block. Gives the same frame as
analysis.store.load.load_requests (without ids, error text or content) plus flat `ChunkArrays`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import psycopg
from psycopg import sql

from analysis.metrics import ChunkArrays, ptr_of
from analysis.store.audioload import attach_audio, no_audio
from analysis.store.choiceload import attach_choices
from analysis.store.connect import connect_reader
from analysis.store.copyout import HEADER, SIGNATURE, copy_out
from analysis.store.packed import Block, load_packed, load_packed_chunks
from analysis.store.workloadload import attach_workload

NULL = -(2**63)  # sentinel for SQL NULL in int8 fields
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
    ("connect_ns", "connect_ns", True),
    ("resent", "resent", True),  # NULL: stored before deploy/sql/0120 (not recorded)
    ("server_prompt_tokens", "server_prompt_tokens", True),
    ("server_prefill_ms", "server_prefill_ms", True),
    ("server_decode_tokens", "server_decode_tokens", True),
    ("server_decode_ms", "server_decode_ms", True),
    ("server_cached_tokens", "server_cached_tokens", True),
    ("server_queue_ms", "server_queue_ms", True),
)
# sent as float8 (the same 8 bytes), NULL as NaN; in the parsed fields as their bits, as
# analysis.store.packed's FLOAT_FIELDS are
_FLOATS = frozenset(("server_prefill_ms", "server_decode_ms", "server_queue_ms"))
_FIELD = 12  # int32 length + int8 value
_N_FIELDS = len(_SCALARS) + len(_CODED) + 2
_FIXED = 2 + _FIELD * (len(_SCALARS) + len(_CODED))  # field count + fixed-width fields
_BLOCK_BYTES = 64 << 20
Parsed = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _dictionaries(conn: psycopg.Connection[Any], run_id: str) -> dict[str, list[str | None]]:
    aggs = sql.SQL(", ").join(
        sql.SQL("array_agg(DISTINCT {c})").format(c=sql.Identifier(c)) for c in _CODED
    )
    with conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT {} FROM requests WHERE run_id = %s").format(aggs), (run_id,))
        row = cur.fetchone()
    assert row is not None
    # sorted in Python, as analysis.store.packed's (so both paths give the same categories)
    return {c: sorted(v or [], key=_text_key) for c, v in zip(_CODED, row, strict=True)}


def _text_key(t: str | None) -> tuple[bool, str]:
    return (t is None, t or "")


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
    for a in range(width):
        sel = align == a
        if sel.any():
            words = raw[a : a + (raw.size - a) // width * width].view(dtype)
            out[sel] = words[(pos[sel] - a) // width]
    return out


def _parse_run(raw: np.ndarray, start: int, rows: int, n: int) -> Parsed:
    """`rows` consecutive rows of equal n (so of equal size) from byte `start`: strided views,
    no per-value gathers."""
    nf = len(_SCALARS) + len(_CODED)
    size = _FIXED + 8 + int(_array_bytes(np.array([n]), 4)[0] + _array_bytes(np.array([n]), 2)[0])
    mat = raw[start : start + rows * size].reshape(rows, size)
    f = mat[:, 2 : 2 + nf * _FIELD].reshape(rows, nf, _FIELD)[:, :, 4:]
    fields = np.ascontiguousarray(f).view(">i8").reshape(rows, nf).astype(np.int64)
    o = _FIXED + 4 + 20  # first offsets element record
    t = o + 8 * n + 4 + 20  # first tokens element record
    offs = np.ascontiguousarray(mat[:, o : o + 8 * n].reshape(rows, n, 8)[:, :, 4:])
    toks = np.ascontiguousarray(mat[:, t : t + 6 * n].reshape(rows, n, 6)[:, :, 4:])
    return (
        fields,
        fields[:, 0],
        offs.view(">i4").ravel().astype(np.int32),
        toks.view(">i2").ravel().astype(np.int16),
    )


def _parse_block(raw: np.ndarray, starts: np.ndarray) -> Parsed:
    """Scalars (rows, fields) int64, n per row, offsets int32 and tokens int16 (flat). Runs of
    consecutive rows with the same n go through strided views; if rows vary too much, every
    value is gathered by position."""
    n_all = _values(raw, starts + 6, ">i8")
    change = np.flatnonzero(np.r_[True, n_all[1:] != n_all[:-1]])
    if change.size * 16 <= starts.size:
        bounds = np.r_[change, starts.size]
        runs = [
            _parse_run(raw, int(starts[a]), int(b - a), int(n_all[a]))
            for a, b in itertools.pairwise(bounds.tolist())
        ]
        return (
            np.concatenate([r[0] for r in runs]),
            n_all,
            np.concatenate([r[2] for r in runs]),
            np.concatenate([r[3] for r in runs]),
        )
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


def _query(run_id: str, dicts: dict[str, list[str | None]], part: int, parts: int) -> bytes:
    exprs: list[sql.Composable] = [
        sql.SQL("COALESCE(({e})::float8, 'NaN'::float8)").format(e=sql.SQL(e))
        if name in _FLOATS
        else sql.SQL("COALESCE(({e})::int8, {null})").format(e=sql.SQL(e), null=sql.Literal(NULL))
        if nullable
        else sql.SQL("({e})::int8").format(e=sql.SQL(e))
        for name, e, nullable in _SCALARS
    ]
    for c in _CODED:  # 0-based code; -1 for NULL
        values = [v for v in dicts[c] if v is not None]
        exprs.append(
            sql.SQL("COALESCE(array_position({d}::text[], {c})::int8 - 1, -1)").format(
                d=sql.Literal(values), c=sql.Identifier(c)
            )
        )
    exprs += [sql.Identifier("chunk_offsets_us"), sql.Identifier("chunk_tokens")]
    where = sql.SQL("run_id = {}::uuid").format(sql.Literal(run_id))
    if parts > 1:  # each row has one idx: the partitions are disjoint and cover the run
        where += sql.SQL(" AND idx % {} = {}").format(sql.Literal(parts), sql.Literal(part))
    q = sql.SQL("COPY (SELECT {} FROM requests WHERE {}) TO STDOUT (FORMAT BINARY)").format(
        sql.SQL(", ").join(exprs), where
    )
    return q.as_bytes(None)


def _read_partition(url_or_conn: str | psycopg.Connection[Any], query: bytes) -> list[Parsed]:
    """Run one binary COPY at the libpq level (one call per row message, no Python generator
    per row) and parse it block by block. The server sends one message per row; row starts come
    from the message lengths and are checked against each row's own length fields."""
    parsed: list[Parsed] = []
    with copy_out(url_or_conn, query, "binary COPY of requests") as pg:
        msgs: list[memoryview] = []
        size = 0
        first = True
        while True:
            nbytes, data = pg.get_copy_data(0)
            if nbytes < 0:
                break
            msgs.append(data)  # a memoryview that keeps its libpq buffer alive
            size += nbytes
            if size >= _BLOCK_BYTES:
                parsed += _parse_messages(msgs, first)
                msgs, size, first = [], 0, False
        parsed += _parse_messages(msgs, first, final=True)
    return parsed


def _parse_messages(
    msgs: Sequence[bytes | memoryview], first: bool, *, final: bool = False
) -> list[Parsed]:
    if not msgs:
        return []
    buf = b"".join(msgs)
    lengths = np.fromiter((len(m) for m in msgs), dtype=np.int64, count=len(msgs))
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    if first:
        if buf[: len(SIGNATURE)] != SIGNATURE:
            raise ValueError("not a PostgreSQL binary COPY stream")
        if lengths[0] == HEADER:  # the header alone in its message
            starts = starts[1:]
        else:  # the header travels with the first row
            starts[0] += HEADER
    if final and bytes(msgs[-1][:2]) == b"\xff\xff":
        starts = starts[:-1]  # the trailer message
    raw = np.frombuffer(buf, dtype=np.uint8)
    starts = starts[starts + _FIXED <= len(buf)]  # drop a trailer-only tail
    ends = np.r_[starts[1:], len(buf) - (2 if final and buf[-2:] == b"\xff\xff" else 0)]
    n = _values(raw, starts + 6, ">i8") if starts.size else starts
    expected = _FIXED + 8 + _array_bytes(n, 4) + _array_bytes(n, 2)
    if not np.array_equal(expected, ends - starts):  # not one row per message: walk the rows
        walked, end = _row_starts(memoryview(buf), int(HEADER if first else 0), len(buf))
        if end not in (len(buf), len(buf) - 2):
            raise ValueError("binary COPY rows do not line up with its messages")
        starts = np.asarray(walked, dtype=np.int64)
    return [_parse_block(raw, starts)] if starts.size else []


def load_requests_fast(
    conn: psycopg.Connection[Any] | str,
    run_id: str,
    *,
    parallel: int = 1,
    packed: bool = True,
    reader: psycopg.Connection[Any] | None = None,
    rows: int | None = None,
) -> tuple[pd.DataFrame, ChunkArrays]:
    """One run's requests as (frame, chunks): the columns of load_requests except request_id,
    error_detail, session/turn, retry_after and content (the connection and server timing
    columns included, NaN where NULL); arrays only in `chunks` (offsets µs
    from send, int32; tokens int16). Row order is the store's (not sorted).

    When the run's request_blocks cover exactly its rows (analysis.store.packed checks counts, ids
    and time span), they are read instead of the int[] columns (`packed=False`: never): the
    same frame and arrays, far cheaper for the server. Otherwise, with a connection URL and
    `parallel` > 1, the run is read over that many connections at once (partitioned by idx
    modulo `parallel`): the server's array serialisation, not the network or numpy, is what
    limits one connection.

    Every read that needs one connection goes over one: `reader` (an open connection to the
    store `conn` names, which the caller has already), else `conn` itself, else one opened here
    for the whole load (each opened connection costs an authentication: 7-15 ms here). `rows`:
    the run's request count, when the caller has just read it (packed.load_packed)."""
    df, chunks = _load(conn, run_id, parallel, packed, reader, True, rows)
    assert isinstance(chunks, ChunkArrays)
    return df, chunks


def load_requests_deferred(
    conn: psycopg.Connection[Any] | str,
    run_id: str,
    *,
    parallel: int = 1,
    reader: psycopg.Connection[Any] | None = None,
    rows: int | None = None,
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks]:
    """`load_requests_fast`, but where the blocks are read their chunk arrays stay in the store
    (a page that shows no per-token figure never pays for them): the second value is then a
    PendingChunks that `load_pending_chunks` reads later; elsewhere the arrays come as always."""
    return _load(conn, run_id, parallel, True, reader, False, rows)


def _load(
    conn: psycopg.Connection[Any] | str,
    run_id: str,
    parallel: int,
    packed: bool,
    reader: psycopg.Connection[Any] | None,
    chunks: bool,
    rows: int | None,
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks]:
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1 (got {parallel})")
    if reader is not None:
        return _load_fast(conn, reader, run_id, parallel, packed, chunks, rows)
    if isinstance(conn, str):
        with connect_reader(conn) as own:
            return _load_fast(conn, own, run_id, parallel, packed, chunks, rows)
    return _load_fast(conn, conn, run_id, parallel, packed, chunks, rows)


@dataclass(frozen=True, slots=True)
class PendingChunks:
    """A run's chunk arrays left in its blocks by `load_requests_deferred`:
    which blocks, in the frame's order, and each request's place (`ptr`, as ChunkArrays')."""

    run_id: str
    blocks: tuple[Block, ...]
    ptr: np.ndarray


class RunChanged(RuntimeError):
    """The blocks a frame was read from are no longer stored as they were."""


def load_pending_chunks(conn: psycopg.Connection[Any] | str, pending: PendingChunks) -> ChunkArrays:
    """The chunk arrays `pending` names, aligned with the frame it came with; RunChanged when
    its blocks were deleted or repacked since (load the run again)."""
    got = load_packed_chunks(conn, pending.run_id, pending.blocks)
    if got is None:
        raise RunChanged(
            f"run {pending.run_id}: its stored blocks changed after its requests were read; "
            "load the run again"
        )
    return ChunkArrays(got[0], got[1], pending.ptr)


def _load_fast(
    source: psycopg.Connection[Any] | str,
    conn: psycopg.Connection[Any],
    run_id: str,
    parallel: int,
    packed: bool,
    chunks: bool,
    rows: int | None,
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks]:
    """load_requests_fast's reads: one-connection ones over `conn`, the parallel partitions of
    the int[] path each over its own connection to `source` (a URL; else one partition)."""
    if packed:
        got = load_packed(conn, run_id, chunks=chunks, rows=rows)
        if got is not None:
            codes = dict(zip(_CODED, got.dicts, strict=True))
            ptr = ptr_of(got.fields[:, 0])
            # blocks never hold a run with audio (deploy/sql/0210): its columns are NaN
            frame = no_audio(_frame(got.fields, codes))
            attach_workload(conn, run_id, frame)  # deploy/sql/0220: not in the blocks
            if got.offsets is None or got.tokens is None:
                return frame, PendingChunks(run_id, got.blocks, ptr)
            return frame, ChunkArrays(got.offsets, got.tokens, ptr)
    dicts = _dictionaries(conn, run_id)
    if parallel == 1 or not isinstance(source, str):  # more connections need a URL
        df, arrays = _assemble(_read_partition(conn, _query(run_id, dicts, 0, 1)), dicts)
    else:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [
                pool.submit(_read_partition, source, _query(run_id, dicts, k, parallel))
                for k in range(parallel)
            ]
            parsed = [p for f in futures for p in f.result()]
        df, arrays = _assemble(parsed, dicts)
    # n > 1 (deploy/sql/0190) and audio (0210): such a run has no blocks, so only this path
    # meets them
    attach_audio(conn, run_id, df)
    attach_workload(conn, run_id, df)  # deploy/sql/0220: every path reads them here
    return df, attach_choices(conn, run_id, df, arrays)


def _assemble(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    dicts: dict[str, list[str | None]],
) -> tuple[pd.DataFrame, ChunkArrays]:
    nf = len(_SCALARS) + len(_CODED)
    fields = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, nf), np.int64)
    ptr = ptr_of(fields[:, 0])
    chunks = ChunkArrays(
        offsets_us=np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int32),
        tokens=np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, np.int16),
        ptr=ptr,
    )
    return _frame(fields, dicts), chunks


def _frame(fields: np.ndarray, dicts: Mapping[str, Sequence[str | None]]) -> pd.DataFrame:
    """The frame of (n, fields) int64 values: `_SCALARS` in order, then `_CODED` as codes into
    `dicts` (-1 for NULL)."""
    cols: dict[str, Any] = {}
    for i, (name, _, nullable) in enumerate(_SCALARS):
        col = fields[:, i]
        if name == "scheduled_us":
            ns = (col * 1000).view("datetime64[ns]")  # what to_datetime(ns, utc=True) gives, fast
            cols["scheduled_at"] = pd.DatetimeIndex(ns).tz_localize("UTC")
        elif name in _FLOATS:
            cols[name] = np.ascontiguousarray(col).view(np.float64)
        elif nullable:
            cols[name] = np.where(col == NULL, np.nan, col.astype(np.float64))
        else:
            cols[name] = np.ascontiguousarray(col)
    for j, c in enumerate(_CODED):
        codes = fields[:, len(_SCALARS) + j]
        values = [v for v in dicts[c] if v is not None]
        cols[c] = (
            pd.Categorical.from_codes(
                np.asarray(codes, dtype=np.int64), categories=pd.Index(values)
            )
            if values
            else None
        )
    # one constructor call: a column set at a time re-checks and re-inserts into the frame's
    # blocks each time
    return pd.DataFrame(cols, index=pd.RangeIndex(fields.shape[0]), copy=False)
