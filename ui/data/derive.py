"""Arranging analysis/ results into the shapes the UI draws: percentile curves per level or
region (analysis.stats.percentiles), frontiers across runs (analysis.stats.frontier), the change
table against a baseline (analysis.verdicts.compare). Every number is computed in analysis/; this
module only selects samples, renames columns and concatenates. Pure functions, no Streamlit, no SQL.

Units: latencies ms; throughput req/s and output tokens/s over each level's steady window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.stats import frontier as afr
from analysis.stats import percentiles as pc

BAND_CONFIDENCE = 0.95
RESAMPLES = (
    400  # replicates of the change table (analysis.verdicts.compare); spectra bands are exact
)
CURVE_COLUMNS = ["series", "percentile", "x", "value_ms", "lo_ms", "hi_ms", "n"]


def latency_rows(df: pd.DataFrame) -> np.ndarray:
    """Requests whose latencies count: ok and in the steady phase (as analysis.reports.summary)."""
    return np.asarray(((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy())


def metric_samples(
    df: pd.DataFrame, metric: str, rows: np.ndarray, chunks: m.ChunkArrays | None = None
) -> np.ndarray:
    """The finite samples (ms) of `metric` over the selected rows; `itl_ms` is per token."""
    if metric == "itl_ms":
        ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
        v = m.itl_per_token_ms(ch, rows)
    else:
        v = m.per_request_values(df, metric)[rows]
    return np.asarray(v[np.isfinite(v)], dtype=np.float64)


def curve(values: np.ndarray, series: str) -> pd.DataFrame:
    """One percentile curve (analysis.stats.percentiles.spectrum: exact values, bootstrap band),
    cut where the samples run out (beyond p = 1 - 1/n only the maximum is known)."""
    s = pc.spectrum(values, confidence=BAND_CONFIDENCE, resamples=RESAMPLES)
    n = int(s["n"].iloc[0]) if len(s) else 0
    s = s[s["percentile"] <= 100.0 * (1.0 - 1.0 / max(n, 1)) + 1e-9]
    out = s.rename(columns={"value": "value_ms", "lower": "lo_ms", "upper": "hi_ms"})
    out.insert(0, "series", series)
    return out[CURVE_COLUMNS].reset_index(drop=True)


def spectra_by(
    df: pd.DataFrame, metric: str, by: str, chunks: m.ChunkArrays | None = None
) -> pd.DataFrame:
    """Percentile curves of `metric` per value of column `by` (level or region), over ok
    steady-phase requests, all other groups pooled."""
    ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
    base = latency_rows(df)
    parts = [
        curve(metric_samples(df, metric, base & (df[by] == key).to_numpy(), ch), f"{by} {key}")
        for key in sorted(df[by].unique(), key=str)
    ]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CURVE_COLUMNS)


FrontierRun = tuple[
    pd.DataFrame, pd.DataFrame, m.ChunkArrays | None, Mapping[int, tuple[float, float]] | None
]


def frontier(
    runs: Mapping[str, FrontierRun],
    names: Mapping[str, str],
    metric: str,
    percentile: float,
) -> pd.DataFrame:
    """Per run (requests, levels, chunks, the levels' rates as its summary has them) the points
    of analysis.stats.frontier.frontier_points, with `run`, `load`, `pareto` (on
    analysis.stats.frontier.pareto_frontier of that run) and `knee`
    (analysis.stats.frontier.knee) columns added."""
    parts = []
    for rid, (df, levels, ch, rates) in runs.items():
        pts = afr.frontier_points(
            df,
            levels,
            metric=metric,
            percentile=percentile,
            chunks=ch,
            rates=rates,
            resamples=RESAMPLES,
        )
        if pts.empty:
            continue
        front = afr.pareto_frontier(pts)
        pts["pareto"] = pts["level"].isin(front["level"])
        k = afr.knee(pts["output_tokens_per_s"], pts["latency"])
        pts["knee"] = False
        if k is not None:
            pts.loc[pts.index[k], "knee"] = True
        pts["load"] = [
            f"{kind or ''} {value:g}"
            if value is not None and np.isfinite(value)
            else str(kind or "")
            for kind, value in zip(pts["kind"], pts["value"], strict=True)
        ]
        pts.insert(0, "run", names.get(rid, rid))
        pts.insert(1, "run_id", rid)
        parts.append(pts)
    if not parts:
        return pd.DataFrame(
            columns=[
                "run",
                "run_id",
                "level",
                "load",
                "request_rate",
                "output_tokens_per_s",
                "latency",
                "latency_lower",
                "latency_upper",
                "n",
                "pareto",
                "knee",
            ]
        )
    return pd.concat(parts, ignore_index=True)


def changes(
    frames: Mapping[str, pd.DataFrame],
    names: Mapping[str, str],
    baseline: str,
    metrics: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Each run against the baseline (analysis.verdicts.compare.compare_runs: the request as the
    unit, Holm over each run's rows (correction, family_size columns); bootstrap CI of the
    difference, Mann-Whitney U, regression/improvement flags), with a `run` column; `metrics`
    defaults to analysis.verdicts.compare.COMPARE_METRICS."""
    # imported here: it brings scipy.stats (~0.7 s on a new server), which the Run page and the
    # others that draw curves from this module never use
    from analysis.verdicts import compare as acmp

    metrics = acmp.COMPARE_METRICS if metrics is None else metrics
    others = [rid for rid in frames if rid != baseline]
    tables = acmp.compare_many(
        frames[baseline], [frames[r] for r in others], metrics=metrics, resamples=RESAMPLES
    )
    for rid, t in zip(others, tables, strict=True):
        t.insert(0, "run", names.get(rid, rid))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
