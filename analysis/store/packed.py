"""Reading a run from `request_blocks` (deploy/sql/0110_request_blocks.sql specifies the body,
0120_request_timings.sql its format 2): one binary COPY of a few large bytea values per
connection, copied into the result arrays in place. Used by analysis.store.fastload when the blocks
cover exactly the run's rows; None otherwise. Format 1 blocks read as format 2 with NULL in the
fields format 2 added.
"""

# The server sends a bytea with a copy (no per-element work, unlike int[]), so the cost is the
# bytes: about 6 bytes per chunk and 170 per request.

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import json
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from analysis.store.connect import connect_reader
from analysis.store.copyout import HEADER, SIGNATURE, copy_out
from loadgen.results.storeformat import (
    BLOCK_CODED,
    BLOCK_FLOAT_FIELDS,
    BLOCK_FORMAT,
    BLOCK_HEAD,
    BLOCK_MAGIC,
    BLOCK_NULL,
    BLOCK_SCALARS,
)

FORMATS = tuple(BLOCK_MAGIC)  # the block formats read
# each format's magic: its number of int64 fields
MAGIC = {BLOCK_MAGIC[f]: BLOCK_SCALARS[f] for f in FORMATS}
HEAD = BLOCK_HEAD
N_SCALARS, N_CODED = BLOCK_SCALARS[BLOCK_FORMAT], BLOCK_CODED  # as the newest format has them
NULL = BLOCK_NULL
# format 2's fields holding float64 bits (NULL: NaN), as indices into the scalars
FLOAT_FIELDS = BLOCK_FLOAT_FIELDS
NAN_BITS = int(np.array([np.nan], dtype="<f8").view("<i8")[0])


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_REUSE_BYTES = 64 << 20
# Where glibc's own rule takes the thresholds once a large block has been freed (the mmap
# threshold rises to its size, up to DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit; the trim
# threshold to twice that). mallopt fixes them for good, so they are left there after a read.
_SETTLED_MMAP, _SETTLED_TRIM = 32 << 20, 64 << 20


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library if it is glibc (it has mallopt), found once (find_library runs ldconfig)."""
    with contextlib.suppress(OSError, AttributeError):
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and libc.mallopt(_M_TRIM_THRESHOLD, _SETTLED_TRIM):
            return libc
    return None


@contextlib.contextmanager
def _reuse_message_buffers() -> Iterator[None]:
    """libpq allocates every COPY message (a block: ~5 MB) afresh and frees it after; glibc
    serves that from mmap or trims it off the heap each time, so the pages are faulted in again
    for every block (measured: 1.1 s of a 1.6 s read of 930 MB). While reading, freed memory is
    kept for reuse. After, the thresholds are set where glibc's dynamic rule settles, not
    back to its static 128 KiB defaults: those would stop the rule, and every array the
    analysis then makes (a column, a sort, a resample) would come from fresh pages, faulted in
    again each time (measured: the Compare page of 5 runs, cold, 1.55 and 1.90 s with the
    defaults set back, 1.18 and 1.32 s with freed memory kept). Where glibc is not the C
    library, nothing changes."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, _REUSE_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _REUSE_BYTES)
    try:
        yield
    finally:
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, _SETTLED_MMAP)
            libc.mallopt(_M_TRIM_THRESHOLD, _SETTLED_TRIM)


Block = tuple[str, int, int]  # a block's id, requests and chunks


@dataclass(slots=True)
class Packed:
    """A run as arrays: fields (n, 1 + N_SCALARS + N_CODED) int64 in analysis.store.fastload's
    column order (chunks per request, the scalars, then global codes into `dicts`; NULL as
    `NULL`, the FLOAT_FIELDS as float64 bits with NULL as NaN), flat chunk offsets (int32) and
    tokens (int16), None when the load left them in the store (`load_packed(chunks=False)`;
    `load_packed_chunks` reads them), request ids (n, 16) bytes, and the blocks read, in the
    order their requests are."""

    fields: np.ndarray
    offsets: np.ndarray | None
    tokens: np.ndarray | None
    ids: np.ndarray
    dicts: list[list[str]]
    blocks: tuple[Block, ...]


def _blocks(conn: psycopg.Connection[Any], run_id: str, rows: int | None) -> list[Block] | None:
    """(block_id, n_requests, n_chunks) of the run's blocks, ordered; None when their request
    count differs from `requests`' (`rows` when the caller has just counted them, else counted
    here; some rows have no block: an older writer, a block-less batch) or the store has no
    request_blocks."""
    row = conn.execute("SELECT to_regclass('request_blocks') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return None
    blocks = conn.execute(
        "SELECT block_id, n_requests, n_chunks FROM request_blocks "
        "WHERE run_id = %s::uuid AND format = ANY(%s) ORDER BY block_id",
        (run_id, list(FORMATS)),
    ).fetchall()
    if not blocks:
        return None
    counted = (
        (rows,)
        if rows is not None
        else conn.execute(
            "SELECT count(*) FROM requests WHERE run_id = %s::uuid", (run_id,)
        ).fetchone()
    )
    other = conn.execute(
        "SELECT count(*) FROM request_blocks WHERE run_id = %s::uuid AND format <> ALL(%s)",
        (run_id, list(FORMATS)),
    ).fetchone()
    if counted is None or other is None or other[0] or sum(b[1] for b in blocks) != counted[0]:
        return None
    return [(str(b[0]), int(b[1]), int(b[2])) for b in blocks]


# Where a body's sections start (0-based), from its format's field count f, its n requests and
# c chunks (deploy/sql/0110's order): the head, scalars and ids, then the chunk offsets, the
# chunks per request and the codes, the chunk tokens, and the dictionary to the end.
def _sections(f: int, n: int, c: int) -> tuple[int, int, int, int]:
    """(end of the ids, start of the chunks per request, start of the tokens, start of the
    dictionary)."""
    ids_end = HEAD.size + 8 * f * n + 16 * n
    per_request = ids_end + 4 * c
    tokens = per_request + 4 * n + 2 * N_CODED * n
    return ids_end, per_request, tokens, tokens + 2 * c


# The same offsets in SQL, over a request_blocks row's format, n_requests and n_chunks:
# `substring` of a body kept out of line and uncompressed (STORAGE EXTERNAL) reads only the
# TOAST chunks it covers, so a section left out is never read from disk or sent.
_F_SQL = "CASE format " + " ".join(f"WHEN {k} THEN {v}" for k, v in BLOCK_SCALARS.items()) + " END"
_IDS_END_SQL = f"({HEAD.size} + (8 * ({_F_SQL}) + 16) * n_requests::int8)"
_PER_REQUEST_SQL = f"({_IDS_END_SQL} + 4 * n_chunks)"
_TOKENS_SQL = f"({_PER_REQUEST_SQL} + {4 + 2 * N_CODED} * n_requests::int8)"
# what a load without the chunk arrays reads: head to ids, per-request counts and codes,
# dictionary (substring counts from 1)
_HEAD_PARTS_SQL = (
    f"substring(body, 1, {_IDS_END_SQL}::int), "
    f"substring(body, ({_PER_REQUEST_SQL} + 1)::int, ({4 + 2 * N_CODED} * n_requests)::int), "
    f"substring(body, ({_TOKENS_SQL} + 2 * n_chunks + 1)::int)"
)
_CHUNK_PARTS_SQL = (
    f"substring(body, ({_IDS_END_SQL} + 1)::int, (4 * n_chunks)::int), "
    f"substring(body, ({_TOKENS_SQL} + 1)::int, (2 * n_chunks)::int)"
)


class _Filler:
    """Copies block bodies (or their sections) into the result arrays at their precomputed
    places; each block's codes are translated into global codes after all dictionaries are
    known."""

    def __init__(self, n: int, c: int, chunks: bool) -> None:
        # column-major: a block's fields are runs of one column, and so are the frame's
        self.fields = np.empty((n, 1 + N_SCALARS + N_CODED), dtype=np.int64, order="F")
        self.chunks = _ChunkFiller(c) if chunks else None
        self.ids = np.empty((n, 16), dtype=np.uint8)
        self.local: list[tuple[int, int, list[list[str]]]] = []  # (row, rows, dictionary)

    def fill(self, parts: Sequence[memoryview], row: int, chunk: int) -> tuple[int, int]:
        """One block: its whole body (one part), or the three sections a load without chunk
        arrays reads (_HEAD_PARTS_SQL). Returns its (requests, chunks)."""
        magic, n, c, dict_len = HEAD.unpack_from(parts[0])
        f = MAGIC.get(magic)
        if f is None:
            raise ValueError(f"request_blocks body: not a block of format {FORMATS}")
        ids_end, per_request, tokens, dictionary = _sections(f, n, c)
        raw = [np.frombuffer(p, dtype=np.uint8) for p in parts]
        if len(raw) == 1:
            if dictionary + dict_len != raw[0].size:
                raise ValueError("request_blocks body: sizes do not add up")
            body = raw[0]
            if self.chunks is not None:
                self.chunks.fill((body[ids_end:per_request], body[tokens:dictionary]), chunk, c)
            head, coded, text = body[:ids_end], body[per_request:tokens], body[dictionary:]
        else:
            head, coded, text = raw
            if (head.size, coded.size, text.size) != (ids_end, tokens - per_request, dict_len):
                raise ValueError("request_blocks body: sizes do not add up")
        p = HEAD.size
        # The body sits at any address in its message: the big sections are copied as bytes
        # into the (aligned) results; the small ones that change type go through a copy.
        for j in range(f):
            self.fields[row : row + n, 1 + j].view(np.uint8)[:] = head[p : p + 8 * n]
            p += 8 * n
        for j in range(f, N_SCALARS):  # an older format: fields it does not have are NULL
            self.fields[row : row + n, 1 + j] = NAN_BITS if j in FLOAT_FIELDS else NULL
        self.ids[row : row + n] = head[p : p + 16 * n].reshape(n, 16)
        self.fields[row : row + n, 0] = np.frombuffer(coded[: 4 * n].tobytes(), dtype="<i4")
        codes = np.frombuffer(coded[4 * n :].tobytes(), dtype="<i2").reshape(N_CODED, n)
        self.fields[row : row + n, 1 + N_SCALARS :] = codes.T
        self.local.append((row, n, json.loads(text.tobytes().decode())))
        return n, c

    def finish(self, blocks: Sequence[Block]) -> Packed:
        """Global dictionaries (sorted, as analysis.store.fastload's) and codes into them."""
        dicts: list[list[str]] = [
            sorted({v for _, _, d in self.local for v in d[j]}) for j in range(N_CODED)
        ]
        index = [{v: i for i, v in enumerate(d)} for d in dicts]
        for row, n, local in self.local:
            for j in range(N_CODED):
                lut = np.array([index[j][v] for v in local[j]] + [-1], dtype=np.int64)
                col = self.fields[row : row + n, 1 + N_SCALARS + j]
                col[:] = lut[col]  # -1 (NULL) takes the last entry: -1
        offsets, tokens = (self.chunks.offsets, self.chunks.tokens) if self.chunks else (None, None)
        return Packed(self.fields, offsets, tokens, self.ids, dicts, tuple(blocks))


class BlocksChanged(ValueError):
    """The blocks read are not those asked for: one is missing, one more, or counts differ."""


class _ChunkFiller:
    """The flat chunk offsets (int32) and tokens (int16) of a run, a block's at a time."""

    def __init__(self, c: int) -> None:
        self.offsets = np.empty(c, dtype=np.int32)
        self.tokens = np.empty(c, dtype=np.int16)

    def fill(self, parts: Sequence[np.ndarray | memoryview], chunk: int, c: int) -> None:
        offsets, tokens = (np.frombuffer(p, dtype=np.uint8) for p in parts)
        if (offsets.size, tokens.size) != (4 * c, 2 * c):
            raise ValueError("request_blocks body: chunk sections of the wrong size")
        self.offsets[chunk : chunk + c].view(np.uint8)[:] = offsets
        self.tokens[chunk : chunk + c].view(np.uint8)[:] = tokens


def _copy_blocks(
    conn: psycopg.Connection[Any],
    run_id: str,
    wanted: Sequence[Block],
    columns: str,
    each: Callable[[int, list[memoryview], int, int], None],
) -> None:
    """COPY `columns` (then n_requests and n_chunks) of the `wanted` blocks, in block_id order,
    and hand each row's values to `each(k, values, n_requests, n_chunks)` (k: the row's
    place in `wanted`); a block missing, or one more, is an error."""
    query = sql.SQL(
        "COPY (SELECT {}, n_requests, n_chunks FROM request_blocks WHERE run_id = {} "
        "AND format = ANY({}) AND block_id = ANY({}) ORDER BY block_id) TO STDOUT (FORMAT BINARY)"
    ).format(
        sql.SQL(columns),  # one of this module's constants
        sql.Literal(run_id),
        sql.Literal(list(FORMATS)),
        sql.Literal([b[0] for b in wanted]),
    )
    k = 0
    with copy_out(conn, query.as_bytes(None), "COPY of request_blocks") as pg:
        first = True
        while True:
            nbytes, data = pg.get_copy_data(0)
            if nbytes < 0:
                break
            start = 0
            if first:  # the header, alone or with the first row
                first = False
                if bytes(data[: len(SIGNATURE)]) != SIGNATURE:
                    raise ValueError("not a PostgreSQL binary COPY stream")
                start = HEADER
                if nbytes == start:
                    continue
            if bytes(data[start : start + 2]) == b"\xff\xff":
                continue  # the trailer
            if k >= len(wanted):
                raise BlocksChanged("COPY of request_blocks: more rows than blocks")
            values = _tuple(memoryview(data), start)
            n, c = struct.unpack(">i", values[-2])[0], struct.unpack(">q", values[-1])[0]
            if (n, c) != wanted[k][1:]:
                raise BlocksChanged("request_blocks: a block's counts changed while it was read")
            each(k, values[:-2], n, c)
            k += 1
    if k != len(wanted):
        raise BlocksChanged("COPY of request_blocks: fewer rows than blocks")


def _tuple(data: memoryview, start: int) -> list[memoryview]:
    """A binary COPY tuple's values (none is NULL here: a body and its sections never are)."""
    (count,) = struct.unpack_from(">h", data, start)
    p, values = start + 2, []
    for _ in range(count):
        (size,) = struct.unpack_from(">i", data, p)
        if size < 0:
            raise ValueError("request_blocks: a NULL where a body was")
        values.append(data[p + 4 : p + 4 + size])
        p += 4 + size
    return values


def _covers(conn: psycopg.Connection[Any], run_id: str, p: Packed) -> bool:
    """The blocks hold each request once (unique ids) and span the run's first and last
    scheduled times; with equal counts (checked first) they are the run's rows."""
    n = p.ids.shape[0]
    if n == 0:
        return False
    words = p.ids.view("<u8").reshape(n, 2)
    hi = np.sort(words[:, 0])
    if bool((hi[1:] == hi[:-1]).any()):  # random ids rarely share 8 bytes: check those fully
        order = np.lexsort((words[:, 1], words[:, 0]))
        w = words[order]
        if bool(((w[1:] == w[:-1]).all(axis=1)).any()):
            return False
    row = conn.execute(
        "SELECT (extract(epoch FROM min(scheduled_at)) * 1000000)::int8, "
        "(extract(epoch FROM max(scheduled_at)) * 1000000)::int8 "
        "FROM requests WHERE run_id = %s::uuid",
        (run_id,),
    ).fetchone()
    sched = p.fields[:, 1]
    return row is not None and (row[0], row[1]) == (int(sched.min()), int(sched.max()))


def load_packed(
    conn: psycopg.Connection[Any] | str,
    run_id: str,
    *,
    chunks: bool = True,
    rows: int | None = None,
) -> Packed | None:
    """The run from its blocks, or None when they do not cover exactly its rows (the caller
    then reads `requests`). `chunks=False` leaves the chunk arrays in the store (about 6 bytes
    of every 10 at 64 chunks a request): `load_packed_chunks` reads them when they are needed.
    Over one connection: the fastest here (the server sends a bytea with a copy, and the
    client's copies into the results contend when two threads do them; measured on 2 cores).
    `rows`: the run's request count, when the caller has just read it (analysis.store.cache's
    fingerprint): a count is a scan of the run's index, about 15 ms at 100k requests, 1 s at 10M."""
    if isinstance(conn, str):
        with connect_reader(conn) as c:
            return _load(c, run_id, chunks, rows)
    return _load(conn, run_id, chunks, rows)


def _load(
    conn: psycopg.Connection[Any], run_id: str, chunks: bool, rows: int | None
) -> Packed | None:
    blocks = _blocks(conn, run_id, rows)
    if blocks is None:
        return None
    places = _places(blocks)
    filler = _Filler(sum(b[1] for b in blocks), sum(b[2] for b in blocks), chunks)
    with _reuse_message_buffers():
        _copy_blocks(
            conn,
            run_id,
            blocks,
            "body" if chunks else _HEAD_PARTS_SQL,
            lambda k, values, n, c: _check(filler.fill(values, *places[k]), (n, c)),
        )
    packed = filler.finish(blocks)
    return packed if _covers(conn, run_id, packed) else None


def load_packed_chunks(
    conn: psycopg.Connection[Any] | str, run_id: str, blocks: Sequence[Block]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The flat chunk offsets (int32) and tokens (int16) of the run that `load_packed(...,
    chunks=False)` read as `blocks` (its Packed.blocks), in the same order; None when one of
    those blocks is no longer stored (the run was deleted or repacked since). A block's id is
    the digest of its requests' ids, so the same id holds the same requests."""
    if isinstance(conn, str):
        with connect_reader(conn) as c:
            return load_packed_chunks(c, run_id, blocks)
    places = _places(blocks)
    filler = _ChunkFiller(sum(b[2] for b in blocks))
    try:
        with _reuse_message_buffers():
            _copy_blocks(
                conn,
                run_id,
                blocks,
                _CHUNK_PARTS_SQL,
                lambda k, values, _n, c: filler.fill(values, places[k][1], c),
            )
    except BlocksChanged:  # not the blocks that were read
        return None
    return filler.offsets, filler.tokens


def _places(blocks: Sequence[Block]) -> list[tuple[int, int]]:
    """Each block's first row and first chunk in the run's arrays."""
    n = np.array([b[1] for b in blocks], dtype=np.int64)
    c = np.array([b[2] for b in blocks], dtype=np.int64)
    return list(zip((np.cumsum(n) - n).tolist(), (np.cumsum(c) - c).tolist(), strict=True))


def _check(got: tuple[int, int], row: tuple[int, int]) -> None:
    if got != row:
        raise ValueError("request_blocks: a body disagrees with its row's counts")
