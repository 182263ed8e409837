"""`peakload compare` against a baseline of several runs: run-to-run variation counted.

Model (random effects): a run's summary (a latency percentile, a throughput, an error rate)
is y = mu + u + e, with u the run's own effect (warm state, machine; Var tau^2) and e its
within-run sampling error (Var v, known from the bootstrap or the counting model of
analysis.verdicts.regression). From K baseline runs: ybar, their sample variance s^2 and mean
within variance vbar; tau^2 = max(0, s^2 - vbar) (the moment estimator of DerSimonian & Laird).
The candidate's difference d = y_c - ybar has Var = tau^2 + v_c + (tau^2 + vbar)/K, and
t = d / sqrt(that) is referred to Student's t with K - 1 degrees of freedom: a prediction
interval for one new run's summary. When tau^2 is 0 the within-run variances carry it (the
test is then conservative). Each row is one one-sided test of the family, decided by Holm
(analysis.verdicts.family) like a single-baseline comparison. With one baseline run
analysis.verdicts.regression.compare_stored judges instead, and says run-to-run variation is not
counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis import metrics as m
from analysis.verdicts import compare as cmp
from analysis.verdicts import family
from analysis.verdicts import regression as rg
from analysis.verdicts.exitcodes import Exit


@dataclass(frozen=True, slots=True)
class Side:
    """One stored run: its runs row, requests and levels."""

    run: Mapping[str, Any]
    df: pd.DataFrame
    levels: pd.DataFrame


def re_test(
    y_base: Sequence[float], v_base: Sequence[float], y_cand: float, v_cand: float
) -> dict[str, Any]:
    """The random-effects prediction test (module docstring): delta, se, p_worse (candidate
    larger), p_better, tau (between-run sd), df. NaN p-values without a spread."""
    y = np.asarray(y_base, dtype=np.float64)
    v = np.asarray(v_base, dtype=np.float64)
    k = y.size
    ybar = float(y.mean())
    s2 = float(y.var(ddof=1)) if k > 1 else math.nan
    vbar = float(v.mean())
    tau2 = max(0.0, s2 - vbar) if k > 1 else math.nan
    var = tau2 + v_cand + (tau2 + vbar) / k
    delta = y_cand - ybar
    out = {"baseline": ybar, "delta": delta, "tau": math.sqrt(tau2), "df": k - 1, "se": None}
    if not (math.isfinite(var) and var > 0 and math.isfinite(delta)) or k < 2:
        return {**out, "p_worse": math.nan, "p_better": math.nan}
    t = delta / math.sqrt(var)
    return {
        **out,
        "se": math.sqrt(var),
        "p_worse": float(stats.t.sf(t, k - 1)),
        "p_better": float(stats.t.cdf(t, k - 1)),
    }


def _row(metric: str, pct: float | None, test: dict[str, Any], cand: float) -> dict[str, Any]:
    base = test["baseline"]
    delta_pct = 100.0 * test["delta"] / base if base and math.isfinite(base) else None
    return {
        "metric": metric,
        "percentile": pct,
        "baseline": base if math.isfinite(base) else None,
        "candidate": cand if math.isfinite(cand) else None,
        "delta": test["delta"] if math.isfinite(test["delta"]) else None,
        "delta_pct": delta_pct,
        "ci_lower": None,
        "ci_upper": None,
        "se": test["se"],
        "between_run_sd": test["tau"] if math.isfinite(test["tau"]) else None,
        "p_worse": test["p_worse"] if math.isfinite(test["p_worse"]) else None,
        "p_better": test["p_better"] if math.isfinite(test["p_better"]) else None,
        "p_value": test["p_worse"] if math.isfinite(test["p_worse"]) else None,
        "test": f"random-effects t ({test['df']} df)",
    }


def compare_multi(
    bases: Sequence[Side],
    cand: Side,
    *,
    metrics: Sequence[str] = rg.LATENCY_METRICS,
    percentiles: Sequence[float] = cmp.COMPARE_PERCENTILES,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    primary: family.Primary | None = None,
) -> rg.Comparison:
    """Judge the candidate against K baseline runs (module docstring); K = 1 is
    analysis.verdicts.regression.compare_stored. A load is compared when the candidate and
    every baseline run ran it."""
    if len(bases) == 1:
        b = bases[0]
        return rg.compare_stored(
            b.run,
            cand.run,
            b.df,
            cand.df,
            b.levels,
            cand.levels,
            metrics=metrics,
            percentiles=percentiles,
            threshold_pct=threshold_pct,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            primary=primary,
        )
    problems = [
        p
        for i, s in enumerate(bases)
        if (p := rg.side_problem(f"baseline {_id(s, i)}", s.run, s.df))
    ]
    if p := rg.side_problem("candidate", cand.run, cand.df):
        problems.append(p)
    pairings = [dict((ld, (lb, lc)) for lb, lc, ld in rg.pair_levels(s.levels, cand.levels)[0])
                for s in bases]  # fmt: skip
    loads = sorted(set.intersection(*(set(p) for p in pairings)))
    if not problems and not loads:
        problems.append(
            "no configured load (kind and value) is in the candidate and every baseline"
        )
    if problems:
        why = "cannot compare: " + "; ".join(problems)
        return rg.Comparison(Exit.CANNOT_COMPARE, why, pd.DataFrame(), [])
    q = np.asarray(percentiles, dtype=np.float64)
    rows: list[dict[str, Any]] = []
    for load in loads:
        lc = pairings[0][load][1]
        where = {"load": load, "level": pairings[0][load][0], "candidate_level": lc}
        b_parts = [_level(s, pairings[i][load][0]) for i, s in enumerate(bases)]
        c_part = _level(cand, lc)
        rows += [{**where, **r} for r in _counting_rows(b_parts, c_part, threshold_pct)]
        for metric in metrics:
            sums = [
                _summary(df, metric, q, resamples, seed + i) for i, (df, _) in enumerate(b_parts)
            ]
            cs = _summary(c_part[0], metric, q, resamples, seed + len(bases))
            for j, p in enumerate(q):
                test = re_test([s[0][j] for s in sums], [s[1][j] for s in sums], cs[0][j], cs[1][j])
                r = _row(metric, float(p), test, float(cs[0][j]))
                r.update(_sizes(r, threshold_pct, worse_up=True))
                r.update(n_base=sum(s[2] for s in sums), n_cand=cs[2], unit=_unit(metric))
                rows.append({**where, **r, "baseline_runs": len(bases)})
    note = (
        f"{len(bases)} baseline runs: run-to-run variation is counted (random-effects test, "
        f"{len(bases) - 1} degrees of freedom)"
    )
    return rg.judged(rows, confidence, [note], primary)


def _id(s: Side, i: int) -> str:
    rid = s.run.get("run_id")
    return str(rid)[:8] if rid else str(i + 1)


def _level(s: Side, level: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    lv = s.levels[s.levels["level"] == level].iloc[0]
    return s.df[(s.df["level"] == level).to_numpy()], {str(k): v for k, v in lv.items()}


def _unit(metric: str) -> str:
    return "request (tokens clustered)" if metric in cmp.TOKEN_METRICS else "request"


def _summary(
    df: pd.DataFrame, metric: str, q: np.ndarray, resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """One run's percentiles, their within-run bootstrap variances and its request count."""
    level = int(df["level"].iloc[0]) if len(df) else 0
    chunks = m.ChunkArrays.from_frame(df) if metric in cmp.TOKEN_METRICS else None
    s = cmp.samples(df, metric, level, chunks)
    summ = cmp.summarize(s, q, resamples, seed)
    return summ.point, summ.var, s.n_requests


def _sizes(r: Mapping[str, Any], threshold_pct: float, *, worse_up: bool) -> dict[str, bool]:
    pct = r.get("delta_pct")
    if pct is None:
        return {"beyond_worse": False, "beyond_better": False}
    sign = 1.0 if worse_up else -1.0
    return {
        "beyond_worse": sign * pct > threshold_pct,
        "beyond_better": sign * pct < -threshold_pct,
    }


def _counting_rows(
    b_parts: Sequence[tuple[pd.DataFrame, dict[str, Any]]],
    c_part: tuple[pd.DataFrame, dict[str, Any]],
    threshold_pct: float,
) -> list[dict[str, Any]]:
    """Error rate and both throughputs, each by the random-effects test over per-run values
    (the error rate's within-run variance from the pooled rate of all runs: its null)."""
    errs = [rg.errors(df) for df, _ in (*b_parts, c_part)]
    pooled = sum(k for _, k in errs) / max(sum(n for n, _ in errs), 1)
    rates = [k / n if n else math.nan for n, k in errs]
    var = [pooled * (1 - pooled) / n if n else math.nan for n, _ in errs]
    test = re_test(rates[:-1], var[:-1], rates[-1], var[-1])
    out = [_row(rg.ERROR_METRIC, None, test, rates[-1])]
    out[0].update(
        beyond_worse=bool(rates[-1] > test["baseline"]),
        beyond_better=bool(rates[-1] < test["baseline"]),
        n_base=sum(n for n, _ in errs[:-1]),
        n_cand=errs[-1][0],
    )
    sides = [rg.throughput_side(df, lv) for df, lv in (*b_parts, c_part)]
    for metric in rg.THROUGHPUT_METRICS:
        ys = [s[metric][0] for s in sides]
        vs = [s[metric][1] for s in sides]
        t = re_test(ys[:-1], vs[:-1], ys[-1], vs[-1])
        # a fall is worse: swap the one-sided p-values
        t["p_worse"], t["p_better"] = t["p_better"], t["p_worse"]
        r = _row(metric, None, t, ys[-1])
        r.update(_sizes(r, threshold_pct, worse_up=False))
        r.update(
            n_base=sum(int(rg.ok_steady(df).sum()) for df, _ in b_parts),
            n_cand=int(rg.ok_steady(c_part[0]).sum()),
        )
        out.append(r)
    for r in out:
        r.update(unit="request", baseline_runs=len(b_parts))
    return out
