"""Results computed from an ended run (its percentile curves, its frontier), kept on local disk
beside the run's cache entry (analysis.store.cache) so that the next report, page or benchmark
asking for the same result with the same parameters reads a small file instead of recomputing
it from a million rows.

A result is used only under the key it was computed with: the run's fingerprint
(analysis.store.cache.fingerprint: the store it was read from, the run's status, end, row count
and last scheduled time), the analysis code and numeric libraries
(analysis.store.summaries.code_version), the result's name and its parameters. A run that
has not ended is never remembered. Frames are Parquet files (pandas and pyarrow keep their
dtypes and `attrs`), written to a temporary name and renamed, so a reader sees a whole file
or none; a file that cannot be read is computed again; a result that
cannot be written is only logged. Files under another key (an older fingerprint or code) are
removed when a new one is written. No prompt or response is in any of them.
"""

from __future__ import annotations

import hashlib
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
    """The remembered results of one run: `get(name, params, compute)` returns the stored frame
    for that name and those parameters, or computes, stores and returns it."""

    def __init__(
        self, run_id: str, fp: Mapping[str, Any] | None, directory: Path | None = None
    ) -> None:
        self.run_id = run_id
        # None: the run has not ended, nothing is remembered
        self.prefix = None if fp is None else _digest([dict(fp), code_version()])
        self.folder = (
            (directory or cache_dir()) / "running" / run_id
            if fp is None
            else entry_path(dict(fp), directory).with_suffix(".results")
        )

    @classmethod
    def of(
        cls, conn: psycopg.Connection[Any], run_id: str, directory: Path | None = None
    ) -> RunResults:
        """The results of `run_id` as read over `conn`."""
        return cls(run_id, fingerprint(conn, run_id), directory)

    def path(self, name: str, params: Mapping[str, Any]) -> Path | None:
        if self.prefix is None:
            return None
        return self.folder / f"{self.prefix}-{name}-{_digest(dict(params))}{SUFFIX}"

    def get(
        self, name: str, params: Mapping[str, Any], compute: Callable[[], pd.DataFrame]
    ) -> pd.DataFrame:
        path = self.path(name, params)
        if path is not None and path.exists():
            try:
                return pd.read_parquet(path)
            except Exception as exc:  # a damaged or foreign file: computed again below
                _log.warning("analysis results: %s unreadable (%s), computed again", path, exc)
        frame = compute()
        if path is not None:
            self._write(path, frame)
        return frame

    def _write(self, path: Path, frame: pd.DataFrame) -> None:
        tmp: Path | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=".", suffix=SUFFIX, dir=self.folder)
            os.close(fd)
            tmp = Path(name)
            frame.to_parquet(tmp)
            tmp.replace(path)
            tmp = None
            for old in self.folder.glob(f"*{SUFFIX}"):
                # another key's file; not a temporary one (".") another process is writing
                if not old.name.startswith((f"{self.prefix}-", ".")):
                    old.unlink(missing_ok=True)
        except (OSError, ValueError, TypeError, ImportError) as exc:
            # a frame Parquet cannot hold (mixed types in a column) or a full disk: not kept
            _log.warning("analysis results: %s not written (%s)", path, exc)
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
