"""Calibration of `compare` on synthetic runs (tests/support/correlated_runs): A/A false-regression
rates and power of the family of tests analysis.verdicts.compare / multirun make, beside the old
per-token method (the token as the unit, one alpha per row), for the calibration tests and
bench/calibration_compare.py. Arrays only (no frames): thousands of simulated runs in seconds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from analysis.stats.ranks import bootstrap_ranks
from analysis.verdicts import compare as cmp
from analysis.verdicts import family
from analysis.verdicts.multirun import re_test
from tests.support import correlated_runs as cr

METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
PERCENTILES = (50.0, 90.0, 99.0)


def side(d: cr.Draw) -> dict[str, cmp.Sample]:
    """One simulated level's samples per metric, as compare takes them (ok requests only)."""
    ch = d.chunks
    ok = d.ok & (np.diff(ch.ptr) > 1)
    last = ch.offsets_us[np.maximum(ch.ptr[1:] - 1, 0)].astype(np.float64) / 1e3
    tokens = np.diff(ch.ptr) * d.model.tokens_per_chunk
    ttft = d.ttft_ms
    e2e = last
    tpot = (e2e - ttft) / np.maximum(tokens - 1, 1)
    gaps, owner = d.gaps_us()
    k = d.model.tokens_per_chunk
    itl = np.repeat(gaps.astype(np.float64) / (1e3 * k), k)
    lab = np.repeat(owner, k)
    keep = ok[lab]
    return {
        "ttft_ms": cmp.Sample(ttft[ok]),
        "tpot_ms": cmp.Sample(tpot[ok]),
        "e2e_ms": cmp.Sample(e2e[ok]),
        "itl_ms": cmp.Sample(itl[keep], lab[keep]),
    }


def run_effect(model: cr.LevelModel, tau: float, rng: np.random.Generator) -> cr.LevelModel:
    """`model` with a run's own effect: TTFT and ITL scaled by exp(tau * N(0, 1)) (one draw for
    the run: a server's warm state, the machine)."""
    f = math.exp(tau * float(rng.standard_normal()))
    return dataclasses.replace(
        model, ttft_median=model.ttft_median * f, itl_median=model.itl_median * f
    )


def new_rows(
    base: dict[str, cmp.Sample],
    cand: dict[str, cmp.Sample],
    *,
    threshold_pct: float,
    confidence: float,
    resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """The family compare judges (METRICS x PERCENTILES), decided by Holm."""
    rows: list[dict[str, Any]] = []
    for metric in METRICS:
        for r in cmp.compare_samples(
            base[metric],
            cand[metric],
            PERCENTILES,
            threshold_pct=threshold_pct,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        ):
            rows.append({"metric": metric, **r})
    family.decide(rows, confidence)
    return rows


def old_regressions(
    base: dict[str, cmp.Sample],
    cand: dict[str, cmp.Sample],
    *,
    threshold_pct: float,
    confidence: float,
    resamples: int,
    seed: int,
) -> list[tuple[str, float]]:
    """The rows the old method called regressions: every token an independent sample (the iid
    bootstrap of the pooled values), a row a regression when its bootstrap CI lies above 0 and
    the change exceeds the threshold (and for p50 a token-level Mann-Whitney p below alpha),
    each row at the same alpha, no correction."""
    alpha = 1.0 - confidence
    q = np.asarray(PERCENTILES)
    out = []
    for metric in METRICS:
        b, c = base[metric].values, cand[metric].values
        draws = []
        for v, s in ((b, seed), (c, seed + 1)):
            idx = bootstrap_ranks(v.size, q, resamples, s)
            draws.append(np.sort(v)[idx])
        diff = draws[1] - draws[0]
        lo = np.quantile(diff, alpha / 2, axis=0)
        pb, pc = np.percentile(b, q), np.percentile(c, q)
        p_mwu = float(stats.mannwhitneyu(c, b, alternative="greater").pvalue)
        for i, p in enumerate(q):
            pct = 100.0 * (pc[i] - pb[i]) / pb[i]
            if pct > threshold_pct and lo[i] > 0 and (p != 50.0 or p_mwu < alpha):
                out.append((metric, float(p)))
    return out


def multi_rows(
    bases: Sequence[dict[str, cmp.Sample]],
    cand: dict[str, cmp.Sample],
    *,
    threshold_pct: float,
    confidence: float,
    resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """The family against K baseline runs (analysis.verdicts.multirun.re_test), Holm-decided."""
    q = np.asarray(PERCENTILES)
    rows: list[dict[str, Any]] = []
    for metric in METRICS:
        sums = [cmp.summarize(b[metric], q, resamples, seed + i) for i, b in enumerate(bases)]
        cs = cmp.summarize(cand[metric], q, resamples, seed + len(bases))
        for j, p in enumerate(q):
            t = re_test(
                [s.point[j] for s in sums], [s.var[j] for s in sums], cs.point[j], cs.var[j]
            )
            pct = 100.0 * t["delta"] / t["baseline"]
            rows.append(
                {
                    "metric": metric,
                    "percentile": float(p),
                    "p_worse": t["p_worse"],
                    "p_better": t["p_better"],
                    "beyond_worse": pct > threshold_pct,
                    "beyond_better": pct < -threshold_pct,
                }
            )
    family.decide(rows, confidence)
    return rows


def binomial_upper(k: int, n: int, confidence: float = 0.99) -> float:
    """The one-sided Clopper-Pearson upper bound of a rate seen k times in n."""
    return 1.0 if k >= n else float(stats.beta.ppf(confidence, k + 1, n - k))


def binomial_lower(k: int, n: int, confidence: float = 0.99) -> float:
    """The one-sided Clopper-Pearson lower bound of a rate seen k times in n."""
    return 0.0 if k <= 0 else float(stats.beta.ppf(1.0 - confidence, k, n - k + 1))
