"""What every page's data shares: one store connection for the app (`st.cache_resource`,
opened on first use, never at import), the runs list and one run's row, and a run's raw
frames (requests, chunk arrays, levels, the level summary) cached as resources keyed by the
run's version, so no page copies them per rerun. Page modules (ui/data/<page>.py) build on it.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import psycopg
import streamlit as st

from analysis import metrics as m
from analysis.reports.summary import level_summary
from analysis.store import cache as acache
from analysis.store import load as al
from analysis.store.connect import connect_reader
from analysis.store.fastload import PendingChunks
from analysis.store.summaries import load_summary, run_version, store_summary

_log = logging.getLogger(__name__)
RUNS_TTL_S = 5


RESULT_TTL_S = 600


LOAD_CONNECTIONS = 2  # connections reading one run at once (analysis.store.fastload)
T = TypeVar("T")


class Store:
    """One connection shared by the app's sessions, used under a lock and reopened if lost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    @contextmanager
    def conn(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = al.open_store(self.url)
            try:
                yield self._conn
            except psycopg.OperationalError:
                self._conn.close()
                self._conn = None
                raise


class Readers:
    """Open connections for the runs' loads (analysis.store.cache), kept between loads and
    lent to one load at a time: opening one is an authentication (7-15 ms here; more over TLS
    and a network), and a page of five runs opened five. At most `keep` are kept idle; one that
    failed is closed, and a load whose kept connection turns out dead (the store restarted) is
    tried again on a new one."""

    def __init__(self, url: str, keep: int) -> None:
        self.url = url
        self.keep = keep
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []

    def run(self, load: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`load(connection)` on a kept connection, or on a new one if none is kept or the
        kept one was lost before `load` could use it."""
        with self._lock:
            kept = self._idle.pop() if self._idle else None
        if kept is not None:
            try:
                return self._lend(kept, load)
            except psycopg.OperationalError:
                pass  # lost while kept (the store restarted, or it timed us out): a new one
        return self._lend(connect_reader(self.url), load)

    def _lend(
        self, conn: psycopg.Connection[Any], load: Callable[[psycopg.Connection[Any]], T]
    ) -> T:
        try:
            result = load(conn)
        except BaseException:
            conn.close()
            raise
        return self._done(conn, result)

    def close(self) -> None:
        """Close the kept connections (a later load opens a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _done(self, conn: psycopg.Connection[Any], result: T) -> T:
        with self._lock:
            idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if idle and not conn.closed and len(self._idle) < self.keep:
                self._idle.append(conn)
                return result
        conn.close()
        return result


@st.cache_resource(show_spinner=False)
def readers(url: str) -> Readers:
    """The app's kept load connections to the store at `url`, shared by its sessions."""
    return Readers(url, LOAD_CONNECTIONS)


def store_url() -> str:
    """The store the app reads: `PEAKLOAD_DATABASE_URL`, else the embedded default."""
    url = os.environ.get(al.DATABASE_URL_ENV, "").strip()
    return url or _embedded_url()


@st.cache_resource(show_spinner="Starting the embedded store…")
def _embedded_url() -> str:
    from workers.store.connect import database_url

    return database_url()


def store() -> Store:
    """The shared store for the configured URL (read on each call, so a changed environment
    gets its own connection)."""
    return _store(store_url())


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    from workers.store.connect import ensure_schema

    ensure_schema(url)
    return Store(url)


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def runs(
    name: str | None = None,
    target: str | None = None,
    model: str | None = None,
    label: str | None = None,
    status: str | None = None,
    schedule: str | None = None,
    limit: int = 500,
    launched_by: str | None = None,
    preset: str | None = None,
    tag: str | None = None,
) -> pd.DataFrame:
    """Stored runs, newest first (analysis.store.load.load_runs); `label` is "key=value";
    `launched_by`, `preset` and `tag` match exactly."""
    labels = None
    if label and "=" in label:
        k, v = label.split("=", 1)
        labels = {k.strip(): v.strip()}
    from workers.local_lease import reap_dead_local_runs

    with store().conn() as c:
        reap_dead_local_runs(c)  # a local run whose process died is listed failed, with why
        return al.load_runs(
            c,
            name_like=name or None,
            target_like=target or None,
            model=model or None,
            labels=labels,
            status=status or None,
            schedule_name=schedule or None,
            launched_by=launched_by or None,
            preset=preset or None,
            tag=tag or None,
            limit=limit,
        )


def validity_word(v: Any) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "unknown"
    return "valid" if bool(v) else "INVALID"


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def run(run_id: str) -> dict[str, Any]:
    """One run's row (analysis.store.load.load_run); LookupError if absent."""
    with store().conn() as c:
        return al.load_run(c, run_id)


def choices(df: pd.DataFrame) -> dict[str, str]:
    """run_id -> a readable label for pickers (name, short id, start)."""
    out: dict[str, str] = {}
    for rid, name, start in zip(df["run_id"], df["name"], df["started_at"], strict=True):
        when = "" if pd.isna(start) else f" · {start:%Y-%m-%d %H:%M}"
        out[str(rid)] = f"{name} · {str(rid)[:8]}{when}"
    return out


def read_labels(*, status: str | None = None, limit: int = 200) -> dict[str, str]:
    """The newest runs' picker labels (`choices`), of this status if given, read without their
    request counts (analysis.store.load.load_run_labels); a local run whose process died is
    reaped first (listed failed, not running). Not cached: `labels` is, the Live page's own."""
    from workers.local_lease import reap_dead_local_runs

    with store().conn() as c:
        reap_dead_local_runs(c)
        return choices(al.load_run_labels(c, status=status, limit=limit))


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def labels(limit: int = 200) -> dict[str, str]:
    """`read_labels` of every status, cached for RUNS_TTL_S."""
    return read_labels(limit=limit)


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def labels_for(run_ids: Sequence[str]) -> dict[str, str]:
    """The picker labels of these runs (those stored), as `labels`."""
    with store().conn() as c:
        return choices(al.load_run_labels(c, run_ids=list(run_ids), limit=None))


def version(run_id: str) -> str:
    """What identifies a run's current content (analysis.store.summaries.run_version: status,
    end and row count; a running run's results are recomputed as it grows)."""
    return run_version(run(run_id))


def versions(run_ids: Sequence[str]) -> tuple[str, ...]:
    return tuple(version(r) for r in run_ids)


class _Loaded:
    """One version of a run's frame and chunk arrays (analysis.store.cache: fast binary load,
    kept on disk once the run has ended), shared read-only by every session; no content
    columns. Read in one load when the arrays are asked for first (`preload`: a page whose
    charts count arrivals), else the frame alone (cache.load_run_deferred: a page that shows
    no per-token figure never reads the arrays) and the arrays when first asked for."""

    def __init__(self, run_id: str, rows: int) -> None:
        self.run_id = run_id
        self._rows = rows  # the run's request count, read with its row (`run`): not recounted
        self._lock = threading.Lock()
        self._frame: pd.DataFrame | None = None
        self._chunks: m.ChunkArrays | PendingChunks | None = None

    def frame(self) -> pd.DataFrame:
        with self._lock:
            if self._frame is None:
                url = store().url
                self._frame, self._chunks, _hit = readers(url).run(
                    lambda c: acache.load_run_deferred(
                        url, self.run_id, parallel=LOAD_CONNECTIONS, reader=c, rows=self._rows
                    )
                )
            return self._frame

    def arrays(self) -> m.ChunkArrays:
        with self._lock:
            if self._frame is None:
                url = store().url
                self._frame, self._chunks, _hit = readers(url).run(
                    lambda c: acache.load_run_cached(
                        url, self.run_id, parallel=LOAD_CONNECTIONS, reader=c, rows=self._rows
                    )
                )
            if isinstance(self._chunks, PendingChunks):
                with store().conn() as c:
                    self._chunks = acache.load_chunks_cached(c, self._chunks)
            assert self._chunks is not None
            return self._chunks


@st.cache_resource(ttl=RESULT_TTL_S, max_entries=12, show_spinner=False)
def _loaded(run_id: str, version: str, rows: int) -> _Loaded:
    return _Loaded(run_id, rows)


def _handle(run_id: str) -> _Loaded:
    """The run's current version's loads, its row read once for the version and the count."""
    row = run(run_id)
    return _loaded(run_id, run_version(row), int(row["requests"]))


def requests(run_id: str) -> pd.DataFrame:
    """All of a run's requests (the frame of analysis.store.fastload, in store order)."""
    return _handle(run_id).frame()


def chunks(run_id: str) -> m.ChunkArrays:
    """Every request's chunk offsets (µs from send) and tokens, aligned with `requests`."""
    return _handle(run_id).arrays()


def preload(run_id: str) -> None:
    """The run's frame and chunk arrays in one load, for a page that needs both: before its
    first `requests`, which would read the frame alone."""
    chunks(run_id)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def levels(run_id: str) -> pd.DataFrame:
    with store().conn() as c:
        return al.load_levels(c, run_id)


def summary(run_id: str) -> dict[str, Any]:
    """analysis.reports.summary.level_summary of the run."""
    return _summary(run_id, version(run_id))


def kept_summary(run_id: str) -> dict[str, Any] | None:
    """The run's stored summary (analysis.store.summaries), None when it has none: for a
    figure the summary holds, where computing the summary would cost more than the figure."""
    return _kept_summary(run_id, version(run_id))


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _kept_summary(run_id: str, version: str) -> dict[str, Any] | None:
    with store().conn() as c:
        return load_summary(c, run(run_id))


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _summary(run_id: str, version: str) -> dict[str, Any]:
    """The stored summary of a finished run (analysis.store.summaries), else computed from its
    requests and then stored for the next reader (a failed write costs only that)."""
    row = run(run_id)
    kept = _kept_summary(run_id, version)
    if kept is not None:
        return kept
    arrays = chunks(run_id)  # first: frame and arrays in one load
    summary = level_summary(requests(run_id), levels(run_id), row, chunks=arrays)
    try:
        with store().conn() as c:
            store_summary(c, row, summary)
    except psycopg.Error as exc:
        _log.warning("run %s: its summary was not stored (%s)", run_id, exc)
    return summary


def csv_bytes(df: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue().encode("utf-8")
