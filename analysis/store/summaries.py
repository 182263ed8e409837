"""A finished run's level summary, kept in the store (`run_summaries`, deploy/sql/0250): computed
once, when `run` or `submit` summarize the run at its end or when a page first needs it, then
read as one row. Analysis writes it (and run_results, analysis.store.derived): its own result,
recomputable at any time.

A stored summary is used only under the key it was computed with (`summary_key`): the run's
status, end and row count (rows that land after the summary, e.g. a spool replayed later,
change it), and the analysis code and the numeric libraries that computed it (a hash of every
module of `analysis/` and `loadgen/results/`, numpy's and pandas' versions). A running run's
summary is never stored: it changes with every row.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg

import analysis
from analysis.store.cache import ENDED
from loadgen import results

TERMINAL = frozenset({"completed", "partial", "failed", "aborted"})


def run_version(run: Mapping[str, Any]) -> str:
    """What identifies a run's content: its status, end and row count (a running run's results
    change as it grows; a finished run's do not)."""
    return f"{run['status']}|{run['ended_at']}|{run['requests']}"


@functools.cache
def code_version() -> str:
    """The analysis code and the numeric libraries a summary is computed with."""
    digest = hashlib.sha256()
    for package in (analysis, results):
        root = Path(package.__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(f"numpy {np.__version__} pandas {pd.__version__}".encode())
    return digest.hexdigest()[:16]


def summary_key(run: Mapping[str, Any]) -> str | None:
    """The key a summary of `run` is stored and found under; None for a run still changing."""
    if run.get("status") not in ENDED:
        return None
    return f"{run_version(run)}|{code_version()}"


def _plain(value: Any) -> Any:
    """numpy scalars as the Python numbers JSON writes (a summary holds nothing else unusual)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a run summary holds a {type(value).__name__}, which JSON cannot keep")


def encode(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, default=_plain, allow_nan=True, separators=(",", ":"))


def load_summary(conn: psycopg.Connection[Any], run: Mapping[str, Any]) -> dict[str, Any] | None:
    """The stored summary of `run` (its row from analysis.store.load.load_run), or None when
    there is none under its current key."""
    key = summary_key(run)
    if key is None:
        return None
    row = conn.execute(
        "SELECT summary FROM run_summaries WHERE run_id = %s AND summary_key = %s",
        (str(run["run_id"]), key),
    ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def store_summary(
    conn: psycopg.Connection[Any],
    run: Mapping[str, Any],
    summary: Mapping[str, Any],
    verdict: Mapping[str, Any] | None = None,
) -> bool:
    """Keep `summary` (level_summary of `run`) under its key, replacing an older one, and with
    it `verdict` (judge_run's JSON) when given; a verdict already kept under the same key stays
    when none is given. False, and nothing written, for a run still changing."""
    key = summary_key(run)
    if key is None:
        return False
    text = encode(summary)
    with conn.transaction():
        conn.execute(
            "INSERT INTO run_summaries (run_id, summary_key, summary, verdict) "
            "VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET summary = EXCLUDED.summary, computed_at = now(), "
            "verdict = CASE WHEN EXCLUDED.verdict IS NULL "
            "AND run_summaries.summary_key = EXCLUDED.summary_key "
            "THEN run_summaries.verdict ELSE EXCLUDED.verdict END, "
            "summary_key = EXCLUDED.summary_key",
            (str(run["run_id"]), key, text, None if verdict is None else encode(verdict)),
        )
    return True


def load_verdict(conn: psycopg.Connection[Any], run: Mapping[str, Any]) -> dict[str, Any] | None:
    """The verdict kept with `run`'s summary under its current key, or None."""
    key = summary_key(run)
    if key is None:
        return None
    row = conn.execute(
        "SELECT verdict FROM run_summaries WHERE run_id = %s AND summary_key = %s "
        "AND verdict IS NOT NULL",
        (str(run["run_id"]), key),
    ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def store_verdict(
    conn: psycopg.Connection[Any], run: Mapping[str, Any], verdict: Mapping[str, Any]
) -> bool:
    """Keep `verdict` on the row of `run`'s summary kept under the same key; False, and
    nothing written, when there is no such summary (the verdict rides on it) or the run is
    still changing."""
    key = summary_key(run)
    if key is None:
        return False
    with conn.transaction():
        cur = conn.execute(
            "UPDATE run_summaries SET verdict = %s WHERE run_id = %s AND summary_key = %s",
            (encode(verdict), str(run["run_id"]), key),
        )
    return cur.rowcount == 1
