"""A speech run's audio (deploy/sql/0210: each request's audio length, bytes and transcript
words) for analysis.store.fastload's frame: NaN columns for a run without audio (every other
API, or stored before 0210), filled from `requests` for one with it. A run with audio has no
request_blocks (workers/store/copyenc.py), so only fastload's `requests` path reads it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis.store.connect import connect_reader
from loadgen.results.storeformat import AUDIO_COLUMNS


def _rows(conn: psycopg.Connection[Any], run_id: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT shard_id, idx, attempt, audio_ms, audio_bytes, transcript_words FROM requests "
        "WHERE run_id = %s::uuid AND (audio_ms IS NOT NULL OR audio_bytes IS NOT NULL "
        "OR transcript_words IS NOT NULL)",
        (run_id,),
    ).fetchall()


def no_audio(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the audio columns, all NaN (float64)."""
    for c in AUDIO_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    return df


def attach_audio(conn: psycopg.Connection[Any] | str, run_id: str, df: pd.DataFrame) -> None:
    """Fill `df`'s audio columns (float64, NaN where NULL) from the run's rows that have them.
    A request is (shard_id, idx, attempt) within its run."""
    no_audio(df)
    if isinstance(conn, str):
        with connect_reader(conn) as own:
            rows = _rows(own, run_id)
    else:
        rows = _rows(conn, run_id)
    if not rows:
        return
    where = {
        (s, int(i), int(a)): k
        for k, (s, i, a) in enumerate(zip(df["shard_id"], df["idx"], df["attempt"], strict=True))
    }
    cols = {c: df[c].to_numpy(dtype=np.float64, copy=True) for c in AUDIO_COLUMNS}
    for shard, idx, attempt, *values in rows:
        k = where.get((shard, int(idx), int(attempt)))
        if k is None:
            continue
        for c, v in zip(AUDIO_COLUMNS, values, strict=True):
            if v is not None:
                cols[c][k] = float(v)
    for c, arr in cols.items():
        df[c] = arr
