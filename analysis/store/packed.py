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
import json
import struct
from collections.abc import Iterator, Sequence
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
_ROW_HEAD = 2 + 4  # a COPY tuple's field count, then the body's length


# glibc's mallopt parameters (malloc.h) and their static defaults
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT = 128 * 1024
_REUSE_BYTES = 64 << 20


@contextlib.contextmanager
def _reuse_message_buffers() -> Iterator[None]:
    """libpq allocates every COPY message (a block: ~5 MB) afresh and frees it after; glibc
    serves that from mmap or trims it off the heap each time, so the pages are faulted in again
    for every block (measured: 1.1 s of a 1.6 s read of 930 MB). While reading, freed memory is
    kept for reuse; after, glibc's static thresholds (the documented defaults) are set back.
    Where glibc is not the C library, nothing changes."""
    libc = None
    with contextlib.suppress(OSError, AttributeError):
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and not libc.mallopt(_M_MMAP_THRESHOLD, _REUSE_BYTES):
            libc = None
    try:
        if libc is not None:
            libc.mallopt(_M_TRIM_THRESHOLD, _REUSE_BYTES)
        yield
    finally:
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT)
            libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT)
            libc.malloc_trim(0)


@dataclass(slots=True)
class Packed:
    """A run as arrays: fields (n, 1 + N_SCALARS + N_CODED) int64 in analysis.store.fastload's
    column order (chunks per request, the scalars, then global codes into `dicts`; NULL as
    `NULL`, the FLOAT_FIELDS as float64 bits with NULL as NaN), flat chunk offsets (int32) and
    tokens (int16), request ids (n, 16) bytes."""

    fields: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    ids: np.ndarray
    dicts: list[list[str]]


def _blocks(conn: psycopg.Connection[Any], run_id: str) -> list[tuple[Any, int, int]] | None:
    """(block_id, n_requests, n_chunks) of the run's blocks, ordered; None when their request
    count differs from `requests`' (some rows have no block: an older writer, a block-less
    batch) or the store has no request_blocks."""
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
    counted = conn.execute(
        "SELECT count(*) FROM requests WHERE run_id = %s::uuid", (run_id,)
    ).fetchone()
    other = conn.execute(
        "SELECT count(*) FROM request_blocks WHERE run_id = %s::uuid AND format <> ALL(%s)",
        (run_id, list(FORMATS)),
    ).fetchone()
    if counted is None or other is None or other[0] or sum(b[1] for b in blocks) != counted[0]:
        return None
    return [(b[0], int(b[1]), int(b[2])) for b in blocks]


class _Filler:
    """Copies block bodies into the result arrays at their precomputed places; each block's
    codes are translated into global codes after all dictionaries are known."""

    def __init__(self, n: int, c: int) -> None:
        # column-major: a block's fields are runs of one column, and so are the frame's
        self.fields = np.empty((n, 1 + N_SCALARS + N_CODED), dtype=np.int64, order="F")
        self.offsets = np.empty(c, dtype=np.int32)
        self.tokens = np.empty(c, dtype=np.int16)
        self.ids = np.empty((n, 16), dtype=np.uint8)
        self.local: list[tuple[int, int, list[list[str]]]] = []  # (row, rows, dictionary)

    def fill(self, body: memoryview, row: int, chunk: int) -> tuple[int, int]:
        magic, n, c, dict_len = HEAD.unpack_from(body)
        f = MAGIC.get(magic)
        if f is None:
            raise ValueError(f"request_blocks body: not a block of format {FORMATS}")
        raw = np.frombuffer(body, dtype=np.uint8)
        p = HEAD.size
        sizes = (8 * f * n, 16 * n, 4 * c, 4 * n, 2 * N_CODED * n, 2 * c, dict_len)
        if p + sum(sizes) != len(body):
            raise ValueError("request_blocks body: sizes do not add up")
        sl = []
        for size in sizes:
            sl.append(raw[p : p + size])
            p += size
        # The body sits at any address in its message: the big sections are copied as bytes
        # into the (aligned) results; the small ones that change type go through a copy.
        for j in range(f):
            self.fields[row : row + n, 1 + j].view(np.uint8)[:] = sl[0][8 * n * j : 8 * n * (j + 1)]
        for j in range(f, N_SCALARS):  # an older format: fields it does not have are NULL
            self.fields[row : row + n, 1 + j] = NAN_BITS if j in FLOAT_FIELDS else NULL
        self.ids[row : row + n] = sl[1].reshape(n, 16)
        self.offsets[chunk : chunk + c].view(np.uint8)[:] = sl[2]
        self.fields[row : row + n, 0] = np.frombuffer(sl[3].tobytes(), dtype="<i4")
        codes = np.frombuffer(sl[4].tobytes(), dtype="<i2").reshape(N_CODED, n)
        self.fields[row : row + n, 1 + N_SCALARS :] = codes.T
        self.tokens[chunk : chunk + c].view(np.uint8)[:] = sl[5]
        self.local.append((row, n, json.loads(bytes(sl[6]).decode())))
        return n, c

    def finish(self) -> Packed:
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
        return Packed(self.fields, self.offsets, self.tokens, self.ids, dicts)


def _copy_blocks(
    conn: psycopg.Connection[Any],
    run_id: str,
    wanted: Sequence[tuple[Any, int, int]],
    places: Sequence[tuple[int, int]],
    filler: _Filler,
) -> None:
    """COPY the bodies of `wanted` blocks (in block_id order) and fill each at its place."""
    query = sql.SQL(
        "COPY (SELECT body FROM request_blocks WHERE run_id = {} AND format = ANY({}) "
        "AND block_id = ANY({}) ORDER BY block_id) TO STDOUT (FORMAT BINARY)"
    ).format(
        sql.Literal(run_id),
        sql.Literal(list(FORMATS)),
        sql.Literal([str(b[0]) for b in wanted]),
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
                raise ValueError("COPY of request_blocks: more rows than blocks")
            (size,) = struct.unpack_from(">i", data, start + 2)
            body = memoryview(data)[start + _ROW_HEAD : start + _ROW_HEAD + size]
            got = filler.fill(body, *places[k])
            if got != (wanted[k][1], wanted[k][2]):
                raise ValueError("request_blocks: a body disagrees with its row's counts")
            k += 1
    if k != len(wanted):
        raise ValueError("COPY of request_blocks: fewer rows than blocks")


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


def load_packed(conn: psycopg.Connection[Any] | str, run_id: str) -> Packed | None:
    """The run from its blocks, or None when they do not cover exactly its rows (the caller
    then reads `requests`). Over one connection: the fastest here (the server sends a bytea
    with a copy, and the client's copies into the results contend when two threads do them;
    measured on 2 cores)."""
    if isinstance(conn, str):
        with connect_reader(conn) as c:
            return _load(c, run_id)
    return _load(conn, run_id)


def _load(conn: psycopg.Connection[Any], run_id: str) -> Packed | None:
    blocks = _blocks(conn, run_id)
    if blocks is None:
        return None
    n = np.array([b[1] for b in blocks], dtype=np.int64)
    c = np.array([b[2] for b in blocks], dtype=np.int64)
    places = list(zip((np.cumsum(n) - n).tolist(), (np.cumsum(c) - c).tolist(), strict=True))
    filler = _Filler(int(n.sum()), int(c.sum()))
    with _reuse_message_buffers():
        _copy_blocks(conn, run_id, blocks, places, filler)
    packed = filler.finish()
    return packed if _covers(conn, run_id, packed) else None
