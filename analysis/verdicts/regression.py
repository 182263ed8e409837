"""`peakload compare`'s verdict: whether a candidate run regressed from a baseline. Levels are
paired by their configured load (kind and value), not by index; each pair is judged on every
latency metric (analysis.verdicts.compare), on throughput and on the error rate; a side that is
invalid, partial or empty cannot be compared at all.

- Error rate: steady-phase requests not ok (`not_sent` included) over all steady requests, by
  Fisher's exact test (one-sided: the candidate's proportion is larger) at 1 - confidence; a
  significant rise is a regression whatever its size (the baseline's rate may be 0).
- Throughput (ok requests/s and output tokens/s over the steady window, analysis.metrics):
  a regression is a fall larger than `threshold_pct` whose z statistic, under a compound-Poisson
  model of completions (Var(rate) = sum of squared per-request tokens / window^2; for requests
  /s each counts 1), is below the one-sided normal quantile of 1 - confidence. Closed-loop
  completions are more regular than Poisson, so the test errs on the side of "no regression".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis import metrics as m
from analysis.verdicts import compare as cmp
from analysis.verdicts.exitcodes import Exit, run_state_code
from analysis.verdicts.sla import CLAIM_METRICS

LATENCY_METRICS = CLAIM_METRICS  # every per-request latency the store can give
THROUGHPUT_METRICS = ("request_rate", "output_tokens_per_s")
ERROR_METRIC = "error_rate"


def side_problem(name: str, run: Mapping[str, Any], df: pd.DataFrame) -> str | None:
    """Why a run cannot take part in a comparison (None if it can)."""
    status = run.get("status")
    valid = run.get("valid")
    valid_b = None if valid is None or pd.isna(valid) else bool(valid)
    code = run_state_code(None if status is None else str(status), valid_b)
    if code is Exit.PARTIAL:
        return f"the {name} is {status if valid_b is not None else f'{status}, not judged'}"
    if code is Exit.INVALID:
        reasons = run.get("invalid_reasons")
        why = "; ".join(map(str, reasons)) if isinstance(reasons, list | tuple) else ""
        return f"the {name}'s measurement is invalid" + (f": {why}" if why else "")
    if not (df["phase"] == "steady").any():
        return f"the {name} is empty: no steady-phase request"
    return None


def pair_levels(base: pd.DataFrame, cand: pd.DataFrame) -> tuple[list[tuple[int, int, str]], str]:
    """(baseline level, candidate level, "kind value") for each configured load in both runs
    (the first level with that load on each side), and a note on loads only one side has."""

    def loads(levels: pd.DataFrame) -> dict[tuple[str, float], int]:
        out: dict[tuple[str, float], int] = {}
        for _, r in levels.sort_values("level").iterrows():
            out.setdefault((str(r["kind"]), round(float(r["value"]), 9)), int(r["level"]))
        return out

    b, c = loads(base), loads(cand)
    both = sorted(set(b) & set(c), key=lambda k: (k[0], k[1]))
    pairs = [(b[k], c[k], f"{k[0]} {k[1]:g}") for k in both]
    only_b = [f"{k[0]} {k[1]:g}" for k in b if k not in c]
    only_c = [f"{k[0]} {k[1]:g}" for k in c if k not in b]
    note = "; ".join(
        s
        for s in (
            f"only the baseline ran {', '.join(only_b)}" if only_b else "",
            f"only the candidate ran {', '.join(only_c)}" if only_c else "",
        )
        if s
    )
    return pairs, note


def error_rate_row(b: pd.DataFrame, c: pd.DataFrame, confidence: float) -> dict[str, Any]:
    """Steady-phase error rates and Fisher's exact test (candidate larger), one row."""
    nb, kb = _errors(b)
    nc, kc = _errors(c)
    rb, rc = (kb / nb if nb else math.nan), (kc / nc if nc else math.nan)
    if nb and nc:
        p_worse = float(stats.fisher_exact([[kc, nc - kc], [kb, nb - kb]], "greater")[1])
        p_better = float(stats.fisher_exact([[kc, nc - kc], [kb, nb - kb]], "less")[1])
    else:
        p_worse = p_better = math.nan
    alpha = 1.0 - confidence
    return _row(
        ERROR_METRIC,
        rb,
        rc,
        p_worse,
        "Fisher exact",
        nb,
        nc,
        regression=rc > rb and p_worse < alpha,
        improvement=rc < rb and p_better < alpha,
    )


def throughput_rows(
    b: pd.DataFrame,
    c: pd.DataFrame,
    b_level: Mapping[str, Any],
    c_level: Mapping[str, Any],
    threshold_pct: float,
    confidence: float,
) -> list[dict[str, Any]]:
    """Request and output-token throughput of one level pair (a fall is the regression), by the
    one definition the summary shows (analysis.metrics.request_rate / output_token_rate: from
    arrivals inside each level's stored steady window)."""
    win_b = m.level_window(b_level, b, np.ones(len(b), dtype=bool))
    win_c = m.level_window(c_level, c, np.ones(len(c), dtype=bool))
    wb, wc = win_b.seconds, win_c.seconds
    tb, tc = m.Timeline.from_frame(b), m.Timeline.from_frame(c)
    rows = []
    z_crit = float(stats.norm.ppf(confidence))
    for metric in THROUGHPUT_METRICS:
        if metric == "request_rate":
            vb, vc = m.request_rate(tb, win_b), m.request_rate(tc, win_c)
            # sum of 1² per request completed inside the window
            sb, sc = m.completed_in(tb, win_b).sum(), m.completed_in(tc, win_c).sum()
            varb, varc = sb / wb**2 if wb else math.nan, sc / wc**2 if wc else math.nan
        else:
            vb = m.output_token_rate(m.Arrivals.of(m.ChunkArrays.from_frame(b), tb), win_b)
            vc = m.output_token_rate(m.Arrivals.of(m.ChunkArrays.from_frame(c), tc), win_c)
            varb, varc = _token_var(b, wb), _token_var(c, wc)
        se = math.sqrt(varb + varc) if varb + varc > 0 else math.nan
        z = (vc - vb) / se if se == se and se > 0 else math.nan
        p = float(stats.norm.cdf(z)) if z == z else math.nan  # one-sided: candidate lower
        pct = 100.0 * (vc - vb) / vb if vb else math.nan
        rows.append(
            _row(
                metric,
                vb,
                vc,
                p,
                "compound-Poisson z",
                int(_ok_steady(b).sum()),
                int(_ok_steady(c).sum()),
                regression=bool(pct == pct and pct < -threshold_pct and z == z and z < -z_crit),
                improvement=bool(pct == pct and pct > threshold_pct and z == z and z > z_crit),
            )
        )
    return rows


@dataclass(slots=True)
class Comparison:
    """Every row of a comparison, the verdict and its exit code."""

    code: Exit
    reason: str
    rows: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def compare_stored(
    base_run: Mapping[str, Any],
    cand_run: Mapping[str, Any],
    base_df: pd.DataFrame,
    cand_df: pd.DataFrame,
    base_levels: pd.DataFrame,
    cand_levels: pd.DataFrame,
    *,
    metrics: Sequence[str] = LATENCY_METRICS,
    percentiles: Sequence[float] = cmp.COMPARE_PERCENTILES,
    threshold_pct: float = 5.0,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Judge the candidate against the baseline (module docstring). CANNOT_COMPARE when a side
    is invalid, partial or empty, or no configured load is in both; FAILED on any regression."""
    problems = [
        p
        for p in (
            side_problem("baseline", base_run, base_df),
            side_problem("candidate", cand_run, cand_df),
        )
        if p
    ]
    pairs, note = pair_levels(base_levels, cand_levels)
    notes = [note] if note else []
    if not problems and not pairs:
        problems.append("no configured load (kind and value) is in both runs")
    if problems:
        return Comparison(
            Exit.CANNOT_COMPARE, "cannot compare: " + "; ".join(problems), pd.DataFrame(), notes
        )
    bl = {int(r["level"]): {str(k): v for k, v in r.items()} for _, r in base_levels.iterrows()}
    cl = {int(r["level"]): {str(k): v for k, v in r.items()} for _, r in cand_levels.iterrows()}
    rows: list[dict[str, Any]] = []
    for lb, lc, load in pairs:
        b = base_df[(base_df["level"] == lb).to_numpy()]
        c = cand_df[(cand_df["level"] == lc).to_numpy()]
        where = {"level": lb, "candidate_level": lc, "load": load}
        rows.append({**where, **error_rate_row(b, c, confidence)})
        for r in throughput_rows(b, c, bl[lb], cl[lc], threshold_pct, confidence):
            rows.append({**where, **r})
        # one level on each side: the latency comparison renumbers the candidate's to match
        c0 = c.assign(level=lb)
        lat = cmp.compare_runs(
            b,
            c0,
            metrics=metrics,
            percentiles=percentiles,
            threshold_pct=threshold_pct,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
        )
        for rec in lat.to_dict("records"):
            r = {str(k): v for k, v in rec.items() if k != "level"}
            rows.append({**where, **r, "p_value": r.get("mwu_p"), "test": "bootstrap CI, MWU"})
    table = pd.DataFrame(rows)
    regressed = table[table["regression"].astype(bool)]
    if len(regressed):
        what = sorted({f"{r['metric']} at {r['load']}" for _, r in regressed.iterrows()})
        return Comparison(Exit.FAILED, "regression: " + ", ".join(what), table, notes)
    return Comparison(Exit.PASSED, "no significant regression", table, notes)


def _errors(df: pd.DataFrame) -> tuple[int, int]:
    steady = (df["phase"] == "steady").to_numpy()
    return int(steady.sum()), int((steady & (df["outcome"] != "ok").to_numpy()).sum())


def _ok_steady(df: pd.DataFrame) -> np.ndarray:
    return ((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy()


def _token_var(df: pd.DataFrame, window_s: float) -> float:
    if not window_s:
        return math.nan
    # every steady request's tokens: a compound-Poisson approximation of the variance of the
    # tokens that arrived inside the window (analysis.metrics.output_token_rate)
    tok = df["output_tokens"].to_numpy(dtype=np.float64)[(df["phase"] == "steady").to_numpy()]
    return float(np.sum(tok**2)) / window_s**2


def _row(
    metric: str,
    base: float,
    cand: float,
    p: float,
    test: str,
    n_base: int,
    n_cand: int,
    *,
    regression: bool,
    improvement: bool,
) -> dict[str, Any]:
    ok = base == base and cand == cand
    delta = cand - base if ok else None
    pct = 100.0 * (cand - base) / base if ok and base else None
    return {
        "metric": metric,
        "percentile": None,
        "baseline": base if base == base else None,
        "candidate": cand if cand == cand else None,
        "delta": delta,
        "delta_pct": pct,
        "ci_lower": None,
        "ci_upper": None,
        "mwu_p": None,
        "p_value": p if p == p else None,
        "test": test,
        "n_base": n_base,
        "n_cand": n_cand,
        "regression": bool(regression),
        "improvement": bool(improvement),
    }
