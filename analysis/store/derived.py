"""Results computed from an ended run (its percentile curves, its frontier), kept so that the
next report, page or benchmark asking for the same result with the same parameters reads a
small Parquet frame instead of recomputing it from a million rows. Two places, looked in in
turn: local disk beside the run's cache entry (analysis.store.cache), then the store itself
(`run_results`, deploy/sql/0260), so the first report of a run on another machine reads it too;
`run` and `submit` keep the report's defaults there when they summarize a run at its end
(analysis.reports.report.keep_default_results).

A result is used only under the key it was computed with: the run's fingerprint
(analysis.store.cache.fingerprint: the store it was read from, the run's status, end, row count
and last scheduled time), the analysis code and numeric libraries
(analysis.store.summaries.code_version), the result's name and its parameters. A run that
has not ended is never remembered. Frames are Parquet files (pandas and pyarrow keep their
dtypes and `attrs`), written to a temporary name and renamed, so a reader sees a whole file
or none; a file or stored frame that cannot be read is computed again; a result that
cannot be written (a full disk, a store that refuses the write) is only logged. Files under
another key (an older fingerprint or code) are removed when a new one is written, and a stored
row under another key is replaced. No prompt or response is in any of them.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg

from analysis.store.cache import cache_dir, entry_path, fingerprint
from analysis.store.summaries import code_version

SUFFIX = ".parquet"

_log = logging.getLogger(__name__)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class RunResults:
    """The remembered results of one run: `get(name, params, compute)` returns the kept frame
    for that name and those parameters (local disk, then the store when a connection is
    given), or computes, keeps and returns it."""

    def __init__(
        self,
        run_id: str,
        fp: Mapping[str, Any] | None,
        directory: Path | None = None,
        store: psycopg.Connection[Any] | None = None,
    ) -> None:
        self.run_id = run_id
        # None: the run has not ended, nothing is remembered
        self.prefix = None if fp is None else _digest([dict(fp), code_version()])
        # the store's key: the fingerprint without the store's own name (the row is in it)
        self.store_key = (
            None
            if fp is None
            else _digest(
                [{k: v for k, v in fp.items() if k not in _NOT_IN_STORE_KEY}, code_version()]
            )
        )
        self.store = store
        self.folder = (
            (directory or cache_dir()) / "running" / run_id
            if fp is None
            else entry_path(dict(fp), directory).with_suffix(".results")
        )

    @classmethod
    def of(
        cls, conn: psycopg.Connection[Any], run_id: str, directory: Path | None = None
    ) -> RunResults:
        """The results of `run_id` as read over `conn`, the store's tier read over it too."""
        return cls(run_id, fingerprint(conn, run_id), directory, store=conn)

    def path(self, name: str, params: Mapping[str, Any]) -> Path | None:
        if self.prefix is None:
            return None
        return self.folder / f"{self.prefix}-{name}-{_digest(dict(params))}{SUFFIX}"

    def get(
        self, name: str, params: Mapping[str, Any], compute: Callable[[], pd.DataFrame]
    ) -> pd.DataFrame:
        path = self.path(name, params)
        if path is None:
            return compute()
        if path.exists():
            try:
                return pd.read_parquet(path)
            except Exception as exc:  # a damaged or foreign file: computed again below
                _log.warning("analysis results: %s unreadable (%s), computed again", path, exc)
        digest = _digest(dict(params))  # the row's `params`, as in the file's name
        data = self._read_stored(name, digest)
        if data is not None:
            try:
                frame = pd.read_parquet(io.BytesIO(data))
            except Exception as exc:  # a damaged row: computed again, and replaced
                _log.warning("analysis results: stored %s unreadable (%s)", name, exc)
            else:
                self._write(path, data)
                return frame
        frame = compute()
        data = _parquet(frame, name)
        if data is not None:
            self._write(path, data)
            self._store(name, digest, data)
        return frame

    def _read_stored(self, name: str, digest: str) -> bytes | None:
        if self.store is None:
            return None
        try:
            with self.store.transaction():
                row = self.store.execute(
                    "SELECT frame FROM run_results WHERE run_id = %s AND name = %s "
                    "AND params = %s AND result_key = %s",
                    (self.run_id, name, digest, self.store_key),
                ).fetchone()
        except psycopg.Error as exc:  # a store migrated before 0260, or one that refuses us
            _log.warning("analysis results: stored %s not read (%s)", name, exc)
            return None
        return None if row is None else bytes(row[0])

    def _store(self, name: str, digest: str, data: bytes) -> None:
        if self.store is None:
            return
        try:
            with self.store.transaction():
                self.store.execute(
                    "INSERT INTO run_results (run_id, name, params, result_key, frame) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id, name, params) DO UPDATE "
                    "SET result_key = EXCLUDED.result_key, frame = EXCLUDED.frame, "
                    "computed_at = now()",
                    (self.run_id, name, digest, self.store_key, data),
                )
        except psycopg.Error as exc:  # a read-only role, a store migrated before 0260
            _log.warning("analysis results: %s not stored (%s)", name, exc)

    def _write(self, path: Path, data: bytes) -> None:
        tmp: Path | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=".", suffix=SUFFIX, dir=self.folder)
            tmp = Path(tmp_name)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            tmp.replace(path)
            tmp = None
            for old in self.folder.glob(f"*{SUFFIX}"):
                # another key's file; not a temporary one (".") another process is writing
                if not old.name.startswith((f"{self.prefix}-", ".")):
                    old.unlink(missing_ok=True)
        except OSError as exc:  # a full disk, a read-only cache folder: not kept
            _log.warning("analysis results: %s not written (%s)", path, exc)
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)


_NOT_IN_STORE_KEY = ("store", "format")


def _parquet(frame: pd.DataFrame, name: str) -> bytes | None:
    """The frame as a Parquet file's bytes; None (logged) for a frame Parquet cannot hold
    (mixed types in a column)."""
    try:
        out = io.BytesIO()
        frame.to_parquet(out)
    except (ValueError, TypeError, ImportError) as exc:
        _log.warning("analysis results: %s not kept (%s)", name, exc)
        return None
    return out.getvalue()
