"""A local cache of loaded runs (analysis.store.fastload's frame and chunk arrays) for runs that
have ended, so a second report, comparison or UI page on a large run reads memory-mapped numpy files
instead of the store. Entries hold no prompt or response text (fastload never loads it).

An entry is used only if the run's status, end time, row count and last scheduled time still
match the store (a finished run's rows do not change; a replayed or repaired run does). Entries
are kept per store (host, port, database; a folder named by their hash): two databases may
hold runs of the same id. Directory: `PEAKLOAD_ANALYSIS_CACHE`, else $XDG_CACHE_HOME (or
~/.cache)/peakload/analysis. An entry is written in a thread of its own while the caller goes on
with the loaded run; an entry that cannot be read whole (removed or rewritten under the reader
by another process) is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis.metrics import ChunkArrays, ptr_of
from analysis.store import fastload
from analysis.store.connect import connect_reader
from analysis.store.fastload import PendingChunks

CACHE_ENV = "PEAKLOAD_ANALYSIS_CACHE"
# 2: the frame has the connection and server timing columns (deploy/sql/0120); 3: the chunk
# arrays in a folder of their own (CHUNKS), which an entry may lack (written by a load that left
# them in the store: the blocks it read are in its meta, and the arrays join it when loaded)
FORMAT = 3
CHUNKS = "chunks"
_CHUNK_FILES = ("offsets_us", "tokens", "ptr")
ENDED = ("completed", "partial", "aborted", "failed")  # a run in these never changes again

_log = logging.getLogger(__name__)


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "peakload" / "analysis"


def store_of(conn: psycopg.Connection[Any]) -> str:
    """Which store a connection reads: host, port and database."""
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"


def entry_path(fp: dict[str, Any], directory: Path | None = None) -> Path:
    """Where the entry of a run with fingerprint `fp` is kept: a folder per store."""
    store = hashlib.sha256(str(fp["store"]).encode("utf-8")).hexdigest()[:12]
    return (directory or cache_dir()) / store / str(fp["run_id"])


# what identifies an ended run's rows: how many (counted, or as the caller read them with the
# run's row) and the last scheduled time (one probe of the run's index)
_FINGERPRINT_COUNTED = (
    "SELECT r.status, r.ended_at, q.n, q.last FROM runs r, LATERAL (SELECT count(*) AS n, "
    "max(scheduled_at) AS last FROM requests WHERE run_id = r.run_id) q "
    "WHERE r.run_id = %(run)s::uuid"
)
_FINGERPRINT_GIVEN = (
    "SELECT r.status, r.ended_at, %(rows)s::int8, (SELECT max(scheduled_at) FROM requests "
    "WHERE run_id = r.run_id) FROM runs r WHERE r.run_id = %(run)s::uuid"
)


def fingerprint(
    conn: psycopg.Connection[Any], run_id: str, *, rows: int | None = None
) -> dict[str, Any] | None:
    """What must match for an entry to be used; None if the run has not ended (no caching).
    `rows`: the run's request count as the caller read it with the run's row (`requests` of
    analysis.store.load.load_run; an ended run's rows do not change): not counted again (a
    scan of the run's index: about 15 ms at 100k requests, 1 s at 10M)."""
    query = _FINGERPRINT_COUNTED if rows is None else _FINGERPRINT_GIVEN
    row = conn.execute(query, {"run": run_id, "rows": rows}).fetchone()
    if row is None or row[0] not in ENDED or row[1] is None:
        return None
    return {
        "format": FORMAT,
        "store": store_of(conn),
        "run_id": run_id,
        "status": row[0],
        "ended_at": row[1].isoformat(),
        "rows": int(row[2]),
        "last": row[3].isoformat() if row[3] else None,
    }


_WRITES: dict[Path, threading.Thread] = {}  # entries being written, by path
_WRITES_LOCK = threading.Lock()


def _save(
    path: Path, fp: dict[str, Any], df: pd.DataFrame, chunks: ChunkArrays | PendingChunks
) -> None:
    """Write the entry in a thread of its own, so the caller (a page, a report) goes on with
    the run it has in memory; the arrays are taken here, so later changes to `df`'s columns do
    not reach the file. At most one write per entry at a time; `wait_for_writes` waits for
    them (the interpreter does too at exit: the threads are not daemons)."""
    _start_write(path, _write, path, _arrays(fp, df, chunks))


def _save_chunks(path: Path, chunks: ChunkArrays) -> None:
    """Add the chunk arrays to the entry at `path` (one written without them), in a thread."""
    files = {f"{name}.npy": getattr(chunks, name) for name in _CHUNK_FILES}
    _start_write(path, _write, path / CHUNKS, files)


def _start_write(path: Path, write: Any, *args: Any) -> None:
    with _WRITES_LOCK:
        if path in _WRITES:
            return
        thread = threading.Thread(
            target=_finish_write, args=(path, write, args), name=f"peakload-cache-{path.name}"
        )
        _WRITES[path] = thread
    thread.start()


def _finish_write(path: Path, write: Any, args: tuple[Any, ...]) -> None:
    try:
        write(*args)
    finally:
        with _WRITES_LOCK:
            _WRITES.pop(path, None)


def wait_for_writes(path: Path | None = None) -> None:
    """Block until the entry at `path` (every entry, with None) being written is on disk."""
    with _WRITES_LOCK:
        threads = list(_WRITES.values()) if path is None else [_WRITES.get(path)]
    for thread in threads:
        if thread is not None:
            thread.join()


def _arrays(
    fp: dict[str, Any], df: pd.DataFrame, chunks: ChunkArrays | PendingChunks
) -> dict[str, np.ndarray | bytes]:
    """The entry's files: one array per column and per chunk array, and meta.json."""
    meta: dict[str, Any] = {"fingerprint": fp, "columns": [], "categories": {}, "none": []}
    files: dict[str, np.ndarray | bytes] = {}
    for col in df.columns:
        s = df[col]
        if s.dtype == object:  # a coded column with no values at all (every row NULL)
            if s.notna().any():
                raise ValueError(f"cannot cache column {col!r} of Python objects")
            meta["none"].append(col)
            arr: np.ndarray = np.zeros(0)
        elif isinstance(s.dtype, pd.CategoricalDtype):
            meta["categories"][col] = [str(c) for c in s.cat.categories]
            arr = s.cat.codes.to_numpy()
        elif col == "scheduled_at":
            arr = s.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy("datetime64[ns]")
            arr = arr.view(np.int64)
        else:
            arr = s.to_numpy()
        files[f"col_{len(meta['columns'])}.npy"] = arr
        meta["columns"].append(col)
    if isinstance(chunks, PendingChunks):
        meta["pending_blocks"] = [list(b) for b in chunks.blocks]
    else:
        for name in _CHUNK_FILES:
            files[f"{CHUNKS}/{name}.npy"] = getattr(chunks, name)
    files["meta.json"] = json.dumps(meta).encode("utf-8")
    return files


def _write(path: Path, files: dict[str, np.ndarray | bytes]) -> None:
    """The files into a new folder beside `path`, then renamed to it; a failure leaves no
    entry (the next reader loads from the store) and is logged."""
    tmp: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
        for name, data in files.items():
            (tmp / name).parent.mkdir(exist_ok=True)
            if isinstance(data, bytes):
                (tmp / name).write_bytes(data)
            else:
                np.save(tmp / name, data)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
    except OSError as exc:
        _log.warning("analysis cache: %s not written (%s)", path, exc)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _load(
    path: Path, fp: dict[str, Any]
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks] | None:
    """The entry at `path` if it is whole and matches `fp`, else None (a miss)."""
    try:
        return _read(path, fp)
    except (OSError, ValueError, KeyError) as exc:  # gone, or rewritten, under this reader
        _log.warning("analysis cache: %s unreadable (%s), loaded from the store", path, exc)
        return None


def _read(
    path: Path, fp: dict[str, Any]
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks] | None:
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if meta.get("fingerprint") != fp:
        return None
    cols: dict[str, Any] = {}
    for i, col in enumerate(meta["columns"]):
        if col in meta["none"]:
            cols[col] = None
            continue
        arr = np.load(path / f"col_{i}.npy", mmap_mode="r")
        if col in meta["categories"]:
            cols[col] = pd.Categorical.from_codes(np.asarray(arr), meta["categories"][col])
        elif col == "scheduled_at":
            cols[col] = pd.to_datetime(np.asarray(arr).view("datetime64[ns]")).tz_localize("UTC")
        else:
            cols[col] = np.asarray(arr)
    chunks = _read_chunks(path)
    if chunks is None:
        pending = meta.get("pending_blocks")
        if pending is None:
            return None
        ptr = ptr_of(cols["n_chunks"])
        blocks = tuple((str(b), int(n), int(c)) for b, n, c in pending)
        df = pd.DataFrame(cols, index=pd.RangeIndex(ptr.size - 1))
        return df, PendingChunks(str(fp["run_id"]), blocks, ptr)
    return pd.DataFrame(cols, index=pd.RangeIndex(chunks.n_requests)), chunks


def _read_chunks(path: Path) -> ChunkArrays | None:
    """The entry's chunk arrays, memory-mapped; None when it has none (yet)."""
    folder = path / CHUNKS
    if not folder.is_dir():
        return None
    # plain ndarray views of the maps: slicing np.memmap objects is slow
    return ChunkArrays(
        *(np.asarray(np.load(folder / f"{n}.npy", mmap_mode="r")) for n in _CHUNK_FILES)
    )


def load_run_cached(
    source: str | psycopg.Connection[Any],
    run_id: str,
    *,
    parallel: int = 2,
    directory: Path | None = None,
    reader: psycopg.Connection[Any] | None = None,
    rows: int | None = None,
) -> tuple[pd.DataFrame, ChunkArrays, bool]:
    """(frame, chunks, hit): from the cache when it matches the store (`source`: its URL or a
    connection to it), else loaded with analysis.store.fastload (and cached if the run has
    ended). Chunk arrays of a hit are memory-mapped, read-only. `reader`: an open connection to
    the store `source` names, for the fingerprint and every one-connection read (else one is
    opened: an authentication, 7-15 ms here, more over TLS). `rows`: the run's request count
    as read with its row (`fingerprint`)."""
    df, chunks, hit = _load_run(source, run_id, parallel, directory, True, reader, rows)
    assert isinstance(chunks, ChunkArrays)
    return df, chunks, hit


def load_run_deferred(
    source: str | psycopg.Connection[Any],
    run_id: str,
    *,
    parallel: int = 2,
    directory: Path | None = None,
    reader: psycopg.Connection[Any] | None = None,
    rows: int | None = None,
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks, bool]:
    """`load_run_cached`, leaving the chunk arrays in the store where the run's blocks allow
    (fastload.load_requests_deferred) unless the entry holds them: `load_chunks_cached` reads them
    when a page needs them, and adds them to the entry."""
    return _load_run(source, run_id, parallel, directory, False, reader, rows)


def _load_run(
    source: str | psycopg.Connection[Any],
    run_id: str,
    parallel: int,
    directory: Path | None,
    chunks: bool,
    reader: psycopg.Connection[Any] | None,
    rows: int | None,
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks, bool]:
    if reader is not None:
        fp = fingerprint(reader, run_id, rows=rows)
        return _load_fingerprinted(source, run_id, fp, parallel, directory, reader, chunks)
    if isinstance(source, str):  # one connection for the fingerprint and the load's reads
        with connect_reader(source) as conn:
            fp = fingerprint(conn, run_id, rows=rows)
            return _load_fingerprinted(source, run_id, fp, parallel, directory, conn, chunks)
    fp = fingerprint(source, run_id, rows=rows)
    return _load_fingerprinted(source, run_id, fp, parallel, directory, None, chunks)


def load_fingerprinted(
    source: str | psycopg.Connection[Any],
    run_id: str,
    fp: dict[str, Any] | None,
    *,
    parallel: int = 2,
    directory: Path | None = None,
    reader: psycopg.Connection[Any] | None = None,
) -> tuple[pd.DataFrame, ChunkArrays, bool]:
    """`load_run_cached` for a caller that has read the run's `fingerprint` already (`reader`:
    an open connection to the store `source` names, for fastload's one-connection reads)."""
    df, chunks, hit = _load_fingerprinted(source, run_id, fp, parallel, directory, reader, True)
    assert isinstance(chunks, ChunkArrays)
    return df, chunks, hit


def _load_fingerprinted(
    source: str | psycopg.Connection[Any],
    run_id: str,
    fp: dict[str, Any] | None,
    parallel: int,
    directory: Path | None,
    reader: psycopg.Connection[Any] | None,
    chunks: bool,
) -> tuple[pd.DataFrame, ChunkArrays | PendingChunks, bool]:
    load = fastload.load_requests_fast if chunks else fastload.load_requests_deferred
    if fp is None:  # nothing to key an entry by
        df, got = load(source, run_id, parallel=parallel, reader=reader)
        return df, got, False
    path = entry_path(fp, directory)
    wait_for_writes(path)  # this process is writing it: it is on disk in a moment
    hit = _load(path, fp)
    if hit is not None:
        df, got = hit
        if chunks and isinstance(got, PendingChunks):
            got = fastload.load_pending_chunks(reader or source, got)
            _save_chunks(path, got)
        return df, got, True
    # the count the fingerprint just read is the blocks' check's (fastload: not counted again)
    df, got = load(source, run_id, parallel=parallel, reader=reader, rows=int(fp["rows"]))
    _save(path, fp, df, got)
    return df, got, False


def load_chunks_cached(
    source: str | psycopg.Connection[Any],
    pending: PendingChunks,
    *,
    directory: Path | None = None,
) -> ChunkArrays:
    """The chunk arrays a `load_run_deferred` left in the store: from the run's entry if they
    have joined it since, else read from the blocks (fastload.load_pending_chunks; RunChanged
    when those blocks are gone) and added to the entry if it still matches the store."""
    if isinstance(source, str):
        with connect_reader(source) as conn:
            return load_chunks_cached(conn, pending, directory=directory)
    fp = fingerprint(source, pending.run_id)
    path = entry_path(fp, directory) if fp is not None else None
    if path is not None:
        wait_for_writes(path)
        with contextlib.suppress(OSError, ValueError):
            kept = _read_chunks(path)
            if kept is not None and kept.n_requests == pending.ptr.size - 1:
                return kept
    chunks = fastload.load_pending_chunks(source, pending)
    if path is not None and fp is not None and _entry_matches(path, fp):
        _save_chunks(path, chunks)
    return chunks


def _entry_matches(path: Path, fp: dict[str, Any]) -> bool:
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(meta.get("fingerprint") == fp)
