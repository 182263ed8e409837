"""Throughput-latency frontiers: per level of a sweep, throughput against a chosen latency
percentile (with its bootstrap band); the Pareto frontier across runs or targets; the knee
(Kneedle). The highest load that still meets the SLOs is a verdict:
analysis.verdicts.max_load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis import metrics as m
from analysis.stats import percentiles as pc


def frontier_points(
    df: pd.DataFrame,
    levels_df: pd.DataFrame,
    *,
    metric: str = "ttft_ms",
    percentile: float = 99.0,
    chunks: m.ChunkArrays | None = None,
    rates: Mapping[int, tuple[float, float]] | None = None,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per level: level, kind, value (configured load), request_rate (req/s) and
    output_tokens_per_s from arrivals inside the level's steady window (the definitions of
    metrics.request_rate and metrics.output_token_rate, as the summary shows them), latency
    (the metric's `percentile`, ms, ok steady requests) with its
    bootstrap band latency_lower/latency_upper, and n samples.

    `rates`: per level its (request_rate, output_tokens_per_s) where they are known already
    (a run's kept summary: `summary_rates`); a level without is counted here. With every level
    in `rates` and a metric other than ITL, no chunk array is read."""
    ok_steady = ((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy()
    level_col = df["level"].to_numpy()
    known = {int(r["level"]): dict(r) for _, r in levels_df.iterrows()}
    all_levels = sorted(set(level_col.tolist()) | set(known))
    rates = rates or {}
    counted = [lvl for lvl in all_levels if int(lvl) not in rates]
    ch = (
        (chunks if chunks is not None else m.ChunkArrays.from_frame(df))
        if counted or metric == "itl_ms"
        else None
    )
    times = m.Timeline.from_frame(df) if counted else None
    arrivals = m.Arrivals.of(ch, times) if ch is not None and times is not None else None
    if metric != "itl_ms":
        per_req = m.per_request_values(df, metric)
    rows = []
    for lvl in all_levels:
        sel = level_col == lvl
        level = known.get(int(lvl), {"level": lvl, "kind": None, "value": None})
        lat_rows = sel & ok_steady
        if metric == "itl_ms":
            assert ch is not None
            vals = m.itl_per_token_ms(ch, lat_rows)
        else:
            vals = per_req[lat_rows]
        s = pc.spectrum(vals, [percentile], confidence=confidence, resamples=resamples, seed=seed)
        if int(lvl) in rates:
            request_rate, token_rate = rates[int(lvl)]
        else:
            assert times is not None and arrivals is not None
            window = m.level_window(level, df, sel)
            request_rate = m.request_rate(times, window)
            token_rate = m.output_token_rate(arrivals, window)
        rows.append(
            {
                "level": int(lvl),
                "kind": level.get("kind"),
                "value": level.get("value"),
                "request_rate": request_rate,
                "output_tokens_per_s": token_rate,
                "latency": float(s["value"].iloc[0]),
                "latency_lower": float(s["lower"].iloc[0]),
                "latency_upper": float(s["upper"].iloc[0]),
                "n": int(s["n"].iloc[0]),
            }
        )
    out = pd.DataFrame(rows)
    out.attrs.update(metric=metric, percentile=percentile)
    return out


def summary_rates(summary: Mapping[str, Any]) -> dict[int, tuple[float, float]]:
    """Per level of a run summary (analysis.reports.summary.level_summary) its request_rate and
    output_tokens_per_s, NaN where the summary has none: `frontier_points`' `rates`."""

    def num(v: Any) -> float:
        return math.nan if v is None else float(v)

    return {
        int(lv["level"]): (num(lv.get("request_rate")), num(lv.get("output_tokens_per_s")))
        for lv in summary.get("levels") or []
    }


def pareto_frontier(
    points: pd.DataFrame, *, x: str = "output_tokens_per_s", y: str = "latency"
) -> pd.DataFrame:
    """The points not dominated by any other (higher or equal `x` with lower or equal `y`, one
    strictly better): more throughput, less latency. Sorted by `x` ascending."""
    p = points.dropna(subset=[x, y])
    if p.empty:
        return p
    order = p.sort_values([x, y], ascending=[False, True])
    keep = []
    best_y = np.inf
    for idx, row in order.iterrows():
        if row[y] < best_y:
            keep.append(idx)
            best_y = row[y]
    return p.loc[keep].sort_values(x).reset_index(drop=True)


def knee(x: npt.ArrayLike, y: npt.ArrayLike) -> int | None:
    """Kneedle (Satopää et al., 2011) for a rising, convex curve such as latency against load:
    normalise x and y to [0, 1] (sorted by x), the difference curve is x_n - y_n, and the knee
    is the point where it is largest: beyond it latency grows faster than load. Returns the
    index into the given arrays, or None with fewer than 3 points or a flat curve."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(xa) & np.isfinite(ya)
    if ok.sum() < 3:
        return None
    idx = np.flatnonzero(ok)[np.argsort(xa[ok], kind="stable")]
    xs, ys = xa[idx], ya[idx]
    if xs[-1] == xs[0] or ys.max() == ys.min():
        return None
    xn = (xs - xs[0]) / (xs[-1] - xs[0])
    yn = (ys - ys.min()) / (ys.max() - ys.min())
    d = xn - yn
    best = int(np.argmax(d))
    if d[best] <= 0:  # the curve never bends below the diagonal: no knee
        return None
    return int(idx[best])
