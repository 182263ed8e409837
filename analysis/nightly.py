"""Nightly history: one latency percentile across the runs of a schedule (runs.schedule_name),
computed in SQL (`percentile_cont`, the same linear interpolation as numpy), and change points
in that series by binary segmentation on the mean with a BIC-type penalty.

Binary segmentation (Scott & Knott 1974; Killick & Eckley's `changepoint` uses the same cost):
the cost of a segment is its sum of squared deviations from its mean; the best split of a
segment is the one that lowers the cost most; it is kept if the gain exceeds the penalty
2·σ²·ln(n) (BIC for one extra mean parameter under Gaussian noise of variance σ²), and both
halves are searched again. The noise sigma is estimated robustly from first differences,
MAD(Δx)/(0.6745·√2), so steps do not inflate it. Segments shorter than `min_size` are not split off.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import psycopg
from psycopg import sql

# per-request metrics as SQL expressions over the requests table (ms)
_SQL_METRICS = {
    "ttft_ms": "(first_token_ns - sent_ns) / 1e6",
    "ttfat_ms": "(first_answer_ns - sent_ns) / 1e6",
    "e2e_ms": "(end_ns - sent_ns) / 1e6",
    "tpot_ms": "CASE WHEN output_tokens > 1 THEN (end_ns - first_token_ns) / 1e6 / "
    "(output_tokens - 1) END",
}


def schedule_history(
    conn: psycopg.Connection[Any],
    schedule_name: str,
    *,
    metric: str = "ttft_ms",
    percentile: float = 99.0,
    level: int | None = None,
    limit: int = 365,
) -> pd.DataFrame:
    """One row per run of the schedule, oldest first: run_id, name, created_at, status,
    valid, value (the pooled `percentile` of `metric` over ok steady requests, ms), n."""
    if metric not in _SQL_METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(_SQL_METRICS)}")
    if not 0 <= percentile <= 100:
        raise ValueError(f"percentile must be within 0..100 (got {percentile})")
    level_filter = sql.SQL("AND q.level = %(level)s") if level is not None else sql.SQL("")
    query = sql.SQL(
        """
        SELECT r.run_id::text AS run_id, r.name, r.created_at, r.status, r.valid,
               s.value, COALESCE(s.n, 0) AS n
        FROM (SELECT * FROM runs WHERE schedule_name = %(schedule)s
              ORDER BY created_at DESC LIMIT %(limit)s) r
        LEFT JOIN LATERAL (
            SELECT percentile_cont(%(p)s) WITHIN GROUP (ORDER BY v) AS value, count(v) AS n
            FROM (SELECT ({expr})::float8 AS v FROM requests q
                  WHERE q.run_id = r.run_id AND q.outcome = 'ok' AND q.phase = 'steady'
                  {level_filter}) x
            WHERE v IS NOT NULL
        ) s ON true
        ORDER BY r.created_at, r.run_id
        """
    ).format(expr=sql.SQL(_SQL_METRICS[metric]), level_filter=level_filter)
    params = {
        "schedule": schedule_name,
        "limit": int(limit),
        "p": percentile / 100.0,
        "level": level,
    }
    with conn.cursor() as cur:
        cur.execute(query, params)
        rows = cur.fetchall()
        names = [d.name for d in cur.description or ()]
    df = pd.DataFrame.from_records(rows, columns=names)
    df["created_at"] = pd.to_datetime(df["created_at"], utc=True)
    df["value"] = pd.to_numeric(df["value"], errors="coerce").astype("float64")
    return df


def noise_sigma(x: npt.ArrayLike) -> float:
    """Robust noise level: MAD of first differences / (0.6745·√2)."""
    d = np.diff(np.asarray(x, dtype=np.float64))
    if d.size == 0:
        return 0.0
    mad = float(np.median(np.abs(d - np.median(d))))
    return float(mad / (0.6745 * np.sqrt(2.0)))


def change_points(
    x: npt.ArrayLike, *, min_size: int = 3, penalty: float | None = None
) -> list[int]:
    """Indices i where a new mean starts (x[i] is the first value of the new segment), sorted.
    NaNs are not allowed (drop them first). See the module docstring for the method."""
    v = np.asarray(x, dtype=np.float64)
    if not np.isfinite(v).all():
        raise ValueError("change_points needs finite values: drop runs without a value first")
    n = v.size
    if n < 2 * min_size:
        return []
    if penalty is None:
        sigma = noise_sigma(v)
        if sigma == 0.0:
            sigma = max(float(np.std(v)) * 1e-3, 1e-12)
        penalty = 2.0 * sigma**2 * np.log(n)
    csum = np.r_[0.0, np.cumsum(v)]
    csq = np.r_[0.0, np.cumsum(v * v)]

    def cost(a: int, b: int) -> float:  # squared deviations of v[a:b] from its mean
        s = csum[b] - csum[a]
        return float(csq[b] - csq[a] - s * s / (b - a))

    found: list[int] = []
    stack = [(0, n)]
    while stack:
        a, b = stack.pop()
        if b - a < 2 * min_size:
            continue
        ks = np.arange(a + min_size, b - min_size + 1)
        left_s = csum[ks] - csum[a]
        right_s = csum[b] - csum[ks]
        left = csq[ks] - csq[a] - left_s**2 / (ks - a)
        right = csq[b] - csq[ks] - right_s**2 / (b - ks)
        gains = cost(a, b) - (left + right)
        best = int(np.argmax(gains))
        if gains[best] > penalty:
            k = int(ks[best])
            found.append(k)
            stack += [(a, k), (k, b)]
    return sorted(found)


def history_with_changes(
    conn: psycopg.Connection[Any], schedule_name: str, **kwargs: Any
) -> tuple[pd.DataFrame, list[int]]:
    """The schedule's history and the change points of its values (runs without a value are
    left out of the detection; indices refer to the returned frame's rows)."""
    hist = schedule_history(conn, schedule_name, **kwargs)
    has = hist["value"].notna().to_numpy()
    idx = np.flatnonzero(has)
    cps = change_points(hist["value"].to_numpy()[has]) if has.any() else []
    hist["segment"] = np.nan
    starts = [0, *cps]
    for seg, s in enumerate(starts):
        end = cps[seg] if seg < len(cps) else len(idx)
        hist.loc[hist.index[idx[s:end]], "segment"] = seg
    return hist, [int(idx[c]) for c in cps]
