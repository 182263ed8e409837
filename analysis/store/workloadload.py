"""The workload columns of a run's requests (deploy/sql/0220: `adapter`, `shared_prefix_tokens`)
for analysis.store.fastload's frame, whichever way its rows were read (request_blocks do not
carry them): one query over the rows that have them; a run without them (no adapters, no shared
prefix, or stored before 0220) gets the columns all missing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis.store.connect import connect_reader

_NO_NAMES = pd.Index(np.array([], dtype=object))


def adapter_column(values: Any) -> pd.Categorical:
    """The `adapter` column as every reader gives it: categorical, as fastload's other text
    columns (the analysis cache stores their codes), NaN where NULL."""
    names = np.asarray(values, dtype=object)
    if not names.any():
        return no_adapters(names.size)
    return pd.Categorical(names, categories=sorted({str(a) for a in names if a}))


def no_adapters(n: int) -> pd.Categorical:
    """`adapter_column` of `n` NULLs (most runs), from codes alone: no pass over n values."""
    return pd.Categorical.from_codes(np.full(n, -1, dtype=np.int8), categories=_NO_NAMES)


def _rows(conn: psycopg.Connection[Any], run_id: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT shard_id, idx, attempt, adapter, shared_prefix_tokens FROM requests "
        "WHERE run_id = %s::uuid AND (adapter IS NOT NULL OR shared_prefix_tokens IS NOT NULL)",
        (run_id,),
    ).fetchall()


def attach_workload(conn: psycopg.Connection[Any] | str, run_id: str, df: pd.DataFrame) -> None:
    """Add loadgen.results.storeformat.WORKLOAD_COLUMNS to `df` in place: `adapter` (categorical,
    NaN where NULL) and `shared_prefix_tokens` (float64, NaN where NULL). A request is
    (shard_id, idx, attempt)."""
    prefix = np.full(len(df), np.nan)
    if isinstance(conn, str):
        with connect_reader(conn) as own:
            rows = _rows(own, run_id)
    else:
        rows = _rows(conn, run_id)
    if not rows:  # no adapter, no shared prefix (most runs): no pass over the requests
        df["adapter"] = no_adapters(len(df))
    else:
        adapter = np.full(len(df), None, dtype=object)
        where = {
            (s, int(i), int(a)): k
            for k, (s, i, a) in enumerate(
                zip(df["shard_id"].astype(object), df["idx"], df["attempt"], strict=True)
            )
        }
        for shard, idx, attempt, name, shared in rows:
            k = where.get((shard, int(idx), int(attempt)))
            if k is None:
                continue
            adapter[k] = name
            if shared is not None:
                prefix[k] = float(shared)
        df["adapter"] = adapter_column(adapter)
    df["shared_prefix_tokens"] = prefix
