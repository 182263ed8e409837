"""The chunk choices of a run's `n > 1` requests (deploy/sql/0190) for analysis.store.fastload's
frame and arrays: per chunk its choice, and per request its per-choice TPOT
(loadgen/results/choices.py); nothing changes for a run without them (n = 1, or stored before
0190)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis.metrics import ChunkArrays
from analysis.store.connect import connect_reader
from loadgen.results.choices import request_tpot_ms

CHOICE_TPOT = "choice_tpot_ms"
"""The frame column holding a request's TPOT over its choices (NaN: no choices stored);
analysis.metrics.tpot_ms takes it over the single-series formula where it has a value."""


def _rows(conn: psycopg.Connection[Any], run_id: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT shard_id, idx, attempt, chunk_choices FROM requests "
        "WHERE run_id = %s::uuid AND chunk_choices IS NOT NULL",
        (run_id,),
    ).fetchall()


def attach_choices(
    conn: psycopg.Connection[Any] | str, run_id: str, df: pd.DataFrame, chunks: ChunkArrays
) -> ChunkArrays:
    """`chunks` with their choices (None when the run stores none) and `df` with CHOICE_TPOT
    (when it does). A request is (shard_id, idx, attempt) within its run."""
    if isinstance(conn, str):
        with connect_reader(conn) as own:
            rows = _rows(own, run_id)
    else:
        rows = _rows(conn, run_id)
    if not rows:
        return chunks
    where = {
        (s, int(i), int(a)): k
        for k, (s, i, a) in enumerate(zip(df["shard_id"], df["idx"], df["attempt"], strict=True))
    }
    per_chunk = np.zeros(chunks.offsets_us.size, dtype=np.int64)
    tpot = np.full(len(df), np.nan)
    for shard, idx, attempt, choices in rows:
        k = where.get((shard, int(idx), int(attempt)))
        if k is None:
            continue
        a, b = int(chunks.ptr[k]), int(chunks.ptr[k + 1])
        c = np.asarray(choices, dtype=np.int64)
        if c.size != b - a:
            raise ValueError(f"requests: a row's chunk_choices has {c.size} values, not {b - a}")
        per_chunk[a:b] = c
        off = np.asarray(chunks.offsets_us[a:b], dtype=np.int64)
        tpot[k] = request_tpot_ms(off, np.asarray(chunks.tokens[a:b], dtype=np.int64), c)
    df[CHOICE_TPOT] = tpot
    return ChunkArrays(chunks.offsets_us, chunks.tokens, chunks.ptr, per_chunk)
