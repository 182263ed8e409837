"""Run-to-run comparison of latency percentiles: per metric, level and percentile, the
candidate's change from the baseline with a bootstrap interval of the difference and a one-sided
p-value; which rows are regressions is decided over the whole family (analysis.verdicts.family).

The request is the unit. Per-request metrics (TTFT, TPOT, E2E, ...) are resampled per request
(the exact order-statistic bootstrap of analysis.stats.ranks); token-level metrics (`itl_ms`,
one sample per token) by the cluster bootstrap of analysis.stats.cluster, which resamples
requests and carries all their tokens, so a request's correlated tokens count as one unit. The
reported n is the number of requests (`tokens_*` beside it for token metrics).

Each row's test: z = (candidate - baseline) / se, se = sqrt(Var*(baseline) + Var*(candidate))
from the bootstrap replicates (independent sides); p_worse = 1 - Phi(z) (candidate larger:
worse), p_better = Phi(z). The p50 of a per-request metric is tested by the one-sided
Mann-Whitney U test on the requests instead (exact under identical distributions, and for a
shift of the whole distribution about 1.2 times as efficient as the bootstrap test of the median
for lognormal latencies; the change in the median must still exceed the threshold). Token
metrics never use a rank test on tokens: their tokens are not independent. The interval shown
is the percentile-bootstrap interval of the difference at `confidence`, per row (not
simultaneous). A side with fewer than MIN_REQUESTS requests, or a per-request percentile with
fewer than MIN_BEYOND requests beyond it, is not tested (p None, outside the family): the
bootstrap cannot see a tail it has no requests in. A row is a regression when its
family-adjusted p_worse is below 1 - confidence and the change exceeds `threshold_pct`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from analysis import metrics as m
from analysis.stats import percentiles as pc
from analysis.stats.cluster import cluster_percentile_draws
from analysis.stats.rank_test import mann_whitney_p
from analysis.stats.ranks import bootstrap_ranks
from analysis.verdicts import family

COMPARE_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
COMPARE_PERCENTILES = (50.0, 90.0, 99.0)
TOKEN_METRICS = frozenset({"itl_ms"})  # many samples per request: clustered by request
MIN_REQUESTS = 20  # per side: below it the bootstrap spread is itself too noisy to test on
MIN_BEYOND = 5  # per-request percentiles: requests needed on the rarer side of the percentile


@dataclass(frozen=True, slots=True)
class Sample:
    """One side's samples of a metric at a level: `values`, and for a token metric the request
    each value belongs to (`clusters`; None: one value per request). `ordered`: the values are
    sorted ascending (a per-request sample made by a run's side), so the percentiles, the
    bootstrap and the rank test read them as they are instead of sorting them each time."""

    values: np.ndarray
    clusters: np.ndarray | None = None
    ordered: bool = False

    @property
    def n_requests(self) -> int:
        if self.clusters is None:
            return int(self.values.size)
        return int(np.unique(self.clusters).size)

    @property
    def n_tokens(self) -> int | None:
        return None if self.clusters is None else int(self.values.size)

    @classmethod
    def of(cls, values: np.ndarray | Sample) -> Sample:
        return values if isinstance(values, Sample) else cls(np.asarray(values, dtype=np.float64))


@dataclass(frozen=True, slots=True)
class Summary:
    """A side's percentiles, their bootstrap replicates (resamples, len(q)) and variance."""

    point: np.ndarray
    draws: np.ndarray

    @property
    def var(self) -> np.ndarray:
        if self.draws.shape[0] < 2:
            return np.full(self.point.shape, np.nan)
        return np.asarray(np.var(self.draws, axis=0, ddof=1), dtype=np.float64)


def samples(df: pd.DataFrame, metric: str, level: int, chunks: m.ChunkArrays | None) -> Sample:
    """Ok steady-phase samples of one level; token metrics carry their request labels."""
    return _Side(df, chunks).sample(metric, level)


class _Side:
    """One run as a side of comparisons: its samples per (metric, level) and their bootstrap
    summaries, each made once however many runs it is compared with (a baseline against four
    candidates was sampled and resampled four times)."""

    def __init__(self, df: pd.DataFrame, chunks: m.ChunkArrays | None = None) -> None:
        self.df, self._chunks = df, chunks
        self._usable = ((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy()
        self._level = df["level"].to_numpy()
        self.levels = set(np.unique(self._level).tolist())
        self._per_request: dict[str, np.ndarray] = {}
        self._samples: dict[tuple[str, int], Sample] = {}
        self._summaries: dict[tuple[str, int, tuple[float, ...], int, int], Summary] = {}

    def sample(self, metric: str, level: int) -> Sample:
        key = (metric, int(level))
        if key not in self._samples:
            sel = self._usable & (self._level == level)
            if metric in TOKEN_METRICS:
                if self._chunks is None:
                    self._chunks = m.ChunkArrays.from_frame(self.df)
                v, lab = m.per_token_values(m.chunk_gaps(self._chunks, sel))
                keep = np.isfinite(v)
                out = Sample(np.asarray(v[keep], dtype=np.float64), np.asarray(lab[keep]))
            else:
                if metric not in self._per_request:
                    self._per_request[metric] = m.per_request_values(self.df, metric)
                v = self._per_request[metric][sel]
                v = np.sort(np.asarray(v[np.isfinite(v)], dtype=np.float64))
                out = Sample(v, ordered=True)
            self._samples[key] = out
        return self._samples[key]

    def summary(
        self, metric: str, level: int, q: Sequence[float], resamples: int, seed: int
    ) -> Summary:
        key = (metric, int(level), tuple(float(x) for x in q), resamples, seed)
        if key not in self._summaries:
            qs = np.asarray(q, dtype=np.float64)
            self._summaries[key] = summarize(self.sample(metric, level), qs, resamples, seed)
        return self._summaries[key]


def summarize(s: Sample, q: np.ndarray, resamples: int, seed: int) -> Summary:
    """Percentiles and bootstrap replicates with the request as the resampled unit."""
    v = s.values
    if v.size == 0:
        return Summary(np.full(q.shape, np.nan), np.full((0, q.size), np.nan))
    point = pc.sorted_percentiles(v, q) if s.ordered else pc.exact_percentiles(v, q)
    if s.clusters is not None:
        draws = cluster_percentile_draws(v, s.clusters, q, resamples=resamples, seed=seed)
    else:
        idx = bootstrap_ranks(v.size, q, resamples, seed)
        draws = v[idx] if s.ordered else pc.order_statistics(v, idx.ravel()).reshape(idx.shape)
    return Summary(point, draws)


def _testable(s: Sample, p: float) -> bool:
    """Enough requests for a bootstrap test of the p-th percentile: MIN_REQUESTS, and for a
    per-request metric MIN_BEYOND of them on the rarer side of it (a p99 needs 500)."""
    n = s.n_requests
    if n < MIN_REQUESTS:
        return False
    return s.clusters is not None or n * min(p, 100.0 - p) / 100.0 >= MIN_BEYOND


def z_pvalues(delta: float, se: float) -> tuple[float, float]:
    """One-sided normal p-values (worse = larger, better = smaller); NaN without a spread."""
    if not (math.isfinite(delta) and math.isfinite(se)) or se <= 0:
        return math.nan, math.nan
    z = delta / se
    return float(special.ndtr(-z)), float(special.ndtr(z))


def compare_samples(
    base: np.ndarray | Sample,
    cand: np.ndarray | Sample,
    percentiles: Sequence[float] = COMPARE_PERCENTILES,
    *,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    base_summary: Summary | None = None,
) -> list[dict[str, Any]]:
    """One row per percentile (module docstring): baseline, candidate, delta, delta_pct,
    ci_lower/ci_upper of the difference, se, p_worse, p_better, n_base/n_cand (requests),
    tokens_base/tokens_cand, unit; regression/improvement decided over these rows alone (Holm,
    analysis.verdicts.family; a caller with more rows decides again over all of them).
    `base_summary`: the baseline's `summarize(base, percentiles, resamples, seed)`, when the
    caller has it already."""
    b, c = Sample.of(base), Sample.of(cand)
    q = np.asarray(percentiles, dtype=np.float64)
    sb = base_summary if base_summary is not None else summarize(b, q, resamples, seed)
    sc = summarize(c, q, resamples, seed + 1)
    alpha = 1.0 - confidence
    testable = [_testable(b, float(p)) and _testable(c, float(p)) for p in q]
    if any(testable):
        diff = sc.draws - sb.draws
        lo = np.quantile(diff, alpha / 2, axis=0)
        hi = np.quantile(diff, 1 - alpha / 2, axis=0)
        se = np.sqrt(sb.var + sc.var)
    unit = "request (tokens clustered)" if b.clusters is not None else "request"
    out = []
    for i, p in enumerate(q):
        row: dict[str, Any] = {
            "percentile": float(p),
            "baseline": _num(sb.point[i]),
            "candidate": _num(sc.point[i]),
            "delta": None,
            "delta_pct": None,
            "ci_lower": None,
            "ci_upper": None,
            "se": None,
            "p_worse": None,
            "p_better": None,
            "n_base": b.n_requests,
            "n_cand": c.n_requests,
            "tokens_base": b.n_tokens,
            "tokens_cand": c.n_tokens,
            "unit": unit,
            "test": ("bootstrap z (cluster)" if b.clusters is not None else "bootstrap z")
            if testable[i]
            else "too few requests to test",
            "beyond_worse": False,
            "beyond_better": False,
        }
        if b.values.size and c.values.size:
            delta = float(sc.point[i] - sb.point[i])
            base_v = float(sb.point[i])
            pct = 100.0 * delta / base_v if base_v else math.inf if delta > 0 else 0.0
            row.update(
                delta=delta,
                delta_pct=pct if math.isfinite(pct) else None,
                beyond_worse=pct > threshold_pct,
                beyond_better=pct < -threshold_pct,
            )
            if testable[i]:
                p_w, p_b = z_pvalues(delta, float(se[i]))
                if p == 50.0 and b.clusters is None:  # the median of a per-request metric
                    # requests as the units
                    p_w, p_b = mann_whitney_p(c.values, b.values, presorted=c.ordered and b.ordered)
                    row["test"] = "Mann-Whitney U"
                row.update(
                    ci_lower=float(lo[i]),
                    ci_upper=float(hi[i]),
                    se=_num(float(se[i])),
                    p_worse=_num(p_w),
                    p_better=_num(p_b),
                )
        out.append(row)
    family.decide(out, confidence)
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
    primary: family.Primary | None = None,
) -> pd.DataFrame:
    """Rows per (metric, level present in both runs, percentile); see `compare_samples`. The
    family is every row of the table: regression flags are decided over all of them (Holm;
    columns p_adjusted, correction, family_size). Levels are matched by index (check the
    labels and configured values separately)."""
    return compare_many(
        base_df,
        [cand_df],
        metrics=metrics,
        percentiles=percentiles,
        threshold_pct=threshold_pct,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        primary=primary,
    )[0]


def compare_many(
    base_df: pd.DataFrame,
    cand_dfs: Sequence[pd.DataFrame],
    *,
    metrics: Sequence[str] = COMPARE_METRICS,
    percentiles: Sequence[float] = COMPARE_PERCENTILES,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    primary: family.Primary | None = None,
) -> list[pd.DataFrame]:
    """`compare_runs(base_df, c)` for each candidate `c`, each its own family, with the
    baseline's samples and bootstrap replicates made once (the same seed: the same rows)."""
    base = _Side(base_df)
    out = []
    for cand_df in cand_dfs:
        cand = _Side(cand_df)
        rows = []
        for metric in metrics:
            for level in sorted(base.levels & cand.levels):
                b, c = base.sample(metric, level), cand.sample(metric, level)
                for r in compare_samples(
                    b,
                    c,
                    percentiles,
                    threshold_pct=threshold_pct,
                    confidence=confidence,
                    resamples=resamples,
                    seed=seed,
                    base_summary=base.summary(metric, level, percentiles, resamples, seed),
                ):
                    rows.append({"metric": metric, "level": int(level), **r})
        family.decide(rows, confidence, primary)
        out.append(pd.DataFrame(rows))
    return out


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


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None
