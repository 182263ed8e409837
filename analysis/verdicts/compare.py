"""Run-to-run comparison: per latency metric, level and percentile, the candidate's change from
the baseline with a bootstrap confidence interval of the difference and a Mann-Whitney U test;
regressions beyond a threshold that are statistically significant fail CI.

A regression (latency metrics: higher is worse) is a row where
- the relative change (candidate - baseline) / baseline exceeds `threshold_pct`, and
- the bootstrap CI (at `confidence`) of the difference lies entirely above 0, and
- for the median (p50) also the one-sided Mann-Whitney U p-value is below 1 - confidence
  (the U test compares whole distributions, so it is not required for tail percentiles).
Bootstrap draws use the exact order-statistic resampling of analysis.stats.percentiles, seeded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis import metrics as m
from analysis.stats import percentiles as pc
from analysis.stats.ranks import bootstrap_ranks

COMPARE_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
COMPARE_PERCENTILES = (50.0, 90.0, 99.0)


def _samples(df: pd.DataFrame, metric: str, level: int, chunks: m.ChunkArrays | None) -> np.ndarray:
    rows = (df["outcome"] == "ok") & (df["phase"] == "steady") & (df["level"] == level)
    sel = rows.to_numpy()
    if metric == "itl_ms":
        ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
        v = m.itl_per_token_ms(ch, sel)
    else:
        v = m.per_request_values(df, metric)[sel]
    return v[np.isfinite(v)]


def _draws(v: np.ndarray, q: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Bootstrap replicates (resamples, len(q)) of the percentiles of v."""
    idx = bootstrap_ranks(v.size, q, resamples, seed)
    return pc.order_statistics(v, idx.ravel()).reshape(idx.shape)


def compare_samples(
    base: np.ndarray,
    cand: np.ndarray,
    percentiles: Sequence[float] = COMPARE_PERCENTILES,
    *,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per percentile: baseline, candidate, delta, delta_pct, ci_lower/ci_upper of the
    difference, mwu_p (one-sided: candidate larger), n_base, n_cand, regression, improvement."""
    q = np.asarray(percentiles, dtype=np.float64)
    out = []
    if base.size == 0 or cand.size == 0:
        for p in q:
            out.append(
                {
                    "percentile": float(p),
                    "baseline": None,
                    "candidate": None,
                    "delta": None,
                    "delta_pct": None,
                    "ci_lower": None,
                    "ci_upper": None,
                    "mwu_p": None,
                    "n_base": int(base.size),
                    "n_cand": int(cand.size),
                    "regression": False,
                    "improvement": False,
                }
            )
        return out
    pb, pcnd = pc.exact_percentiles(base, q), pc.exact_percentiles(cand, q)
    diff = _draws(cand, q, resamples, seed + 1) - _draws(base, q, resamples, seed)
    alpha = 1.0 - confidence
    lo = np.quantile(diff, alpha / 2, axis=0)
    hi = np.quantile(diff, 1 - alpha / 2, axis=0)
    p_worse = float(stats.mannwhitneyu(cand, base, alternative="greater").pvalue)
    p_better = float(stats.mannwhitneyu(cand, base, alternative="less").pvalue)
    for i, p in enumerate(q):
        delta = float(pcnd[i] - pb[i])
        pct = 100.0 * delta / pb[i] if pb[i] else float("inf") if delta else 0.0
        median = p == 50.0
        worse = pct > threshold_pct and lo[i] > 0 and (not median or p_worse < alpha)
        better = pct < -threshold_pct and hi[i] < 0 and (not median or p_better < alpha)
        out.append(
            {
                "percentile": float(p),
                "baseline": float(pb[i]),
                "candidate": float(pcnd[i]),
                "delta": delta,
                "delta_pct": float(pct),
                "ci_lower": float(lo[i]),
                "ci_upper": float(hi[i]),
                "mwu_p": p_worse,
                "n_base": int(base.size),
                "n_cand": int(cand.size),
                "regression": bool(worse),
                "improvement": bool(better),
            }
        )
    return out


def compare_runs(
    base_df: pd.DataFrame,
    cand_df: pd.DataFrame,
    *,
    metrics: Sequence[str] = COMPARE_METRICS,
    percentiles: Sequence[float] = COMPARE_PERCENTILES,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Rows per (metric, level present in both runs, percentile); see `compare_samples`.
    Levels are matched by index (check the labels and configured values separately)."""
    bch = m.ChunkArrays.from_frame(base_df) if "itl_ms" in metrics else None
    cch = m.ChunkArrays.from_frame(cand_df) if "itl_ms" in metrics else None
    levels = sorted(set(base_df["level"].tolist()) & set(cand_df["level"].tolist()))
    rows = []
    for metric in metrics:
        for level in levels:
            b = _samples(base_df, metric, level, bch)
            c = _samples(cand_df, metric, level, cch)
            for r in compare_samples(
                b,
                c,
                percentiles,
                threshold_pct=threshold_pct,
                confidence=confidence,
                resamples=resamples,
                seed=seed,
            ):
                rows.append({"metric": metric, "level": int(level), **r})
    return pd.DataFrame(rows)


def label_differences(
    base: Mapping[str, Any], cand: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Test-matrix labels (and model/target) that differ: runs compared across them measure
    different things."""
    diffs: dict[str, tuple[Any, Any]] = {}
    for key in ("model", "target_url", "api"):
        if base.get(key) != cand.get(key):
            diffs[key] = (base.get(key), cand.get(key))
    bl, cl = base.get("labels") or {}, cand.get("labels") or {}
    for key in sorted(set(bl) | set(cl)):
        if bl.get(key) != cl.get(key):
            diffs[f"labels.{key}"] = (bl.get(key), cl.get(key))
    return diffs
