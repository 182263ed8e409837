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

Every row is one one-sided test of the family (analysis.verdicts.family); which rows are
regressions is decided over all of them by Holm's procedure at 1 - confidence, the threshold
(for latency and throughput) applying as well. One run per side sees only within-run noise;
analysis.verdicts.multirun compares against a baseline of several runs.
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
from analysis.stats.workload_split import adapters_of
from analysis.verdicts import compare as cmp
from analysis.verdicts import family
from analysis.verdicts.exitcodes import Exit, run_state_code
from analysis.verdicts.sla import CLAIM_METRICS
from loadgen.results.audio_formulas import AUDIO_SLO_METRICS

# every per-request latency the store gives for any run; a speech run's own (ttfab_ms,
# audio_rtf) are compared when both runs have audio (ui/commands/compare.py), never added to
# a text run's family of tests
LATENCY_METRICS = tuple(x for x in CLAIM_METRICS if x not in AUDIO_SLO_METRICS)
AUDIO_METRICS = AUDIO_SLO_METRICS
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
    nb, kb = errors(b)
    nc, kc = errors(c)
    rb, rc = (kb / nb if nb else math.nan), (kc / nc if nc else math.nan)
    if nb and nc:
        p_worse = float(stats.fisher_exact([[kc, nc - kc], [kb, nb - kb]], "greater")[1])
        p_better = float(stats.fisher_exact([[kc, nc - kc], [kb, nb - kb]], "less")[1])
    else:
        p_worse = p_better = math.nan
    return row(
        ERROR_METRIC,
        rb,
        rc,
        (p_worse, p_better),
        "Fisher exact",
        nb,
        nc,
        beyond_worse=bool(rc > rb),
        beyond_better=bool(rc < rb),
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
    side_b, side_c = throughput_side(b, b_level), throughput_side(c, c_level)
    rows = []
    for metric in THROUGHPUT_METRICS:
        (vb, varb), (vc, varc) = side_b[metric], side_c[metric]
        se = math.sqrt(varb + varc) if varb + varc > 0 else math.nan
        z = (vc - vb) / se if se == se and se > 0 else math.nan
        # one-sided: a lower candidate is worse
        p_w, p_b = (
            (float(stats.norm.cdf(z)), float(stats.norm.sf(z))) if z == z else (math.nan,) * 2
        )
        pct = 100.0 * (vc - vb) / vb if vb else math.nan
        rows.append(
            row(
                metric,
                vb,
                vc,
                (p_w, p_b),
                "compound-Poisson z",
                int(ok_steady(b).sum()),
                int(ok_steady(c).sum()),
                beyond_worse=bool(pct == pct and pct < -threshold_pct),
                beyond_better=bool(pct == pct and pct > threshold_pct),
            )
        )
    return rows


def throughput_side(df: pd.DataFrame, level: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """One level's request and output-token throughput, each with its compound-Poisson
    variance (module docstring): {metric: (value, variance)}."""
    win = m.level_window(level, df, np.ones(len(df), dtype=bool))
    w = win.seconds
    tl = m.Timeline.from_frame(df)
    # sum of 1² per request completed inside the window
    done = float(m.completed_in(tl, win).sum())
    tokens = m.output_token_rate(m.Arrivals.of(m.ChunkArrays.from_frame(df), tl), win)
    return {
        "request_rate": (m.request_rate(tl, win), done / w**2 if w else math.nan),
        "output_tokens_per_s": (tokens, _token_var(df, w)),
    }


@dataclass(slots=True)
class Comparison:
    """Every row of a comparison, the verdict and its exit code."""

    code: Exit
    reason: str
    rows: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    family: dict[str, Any] = field(default_factory=dict)  # analysis.verdicts.family.describe


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
    primary: family.Primary | None = None,
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
            rows.append({**where, **r, "p_value": r.get("p_worse")})
        # per LoRA adapter both sides asked for (deploy/sql/0220): its own latency rows, in the
        # same family (each is one more test), named by the load and the adapter
        for name in sorted(set(adapters_of(b)) & set(adapters_of(c))):
            lat = cmp.compare_runs(
                b[(b["adapter"] == name).to_numpy()],
                c0[(c0["adapter"] == name).to_numpy()],
                metrics=metrics,
                percentiles=percentiles,
                threshold_pct=threshold_pct,
                confidence=confidence,
                resamples=resamples,
                seed=seed,
            )
            at = {**where, "load": f"{load} · adapter {name}", "adapter": name}
            for rec in lat.to_dict("records"):
                r = {str(k): v for k, v in rec.items() if k != "level"}
                rows.append({**at, **r, "p_value": r.get("p_worse")})
    return judged(rows, confidence, [*notes, SINGLE_BASELINE_NOTE], primary)


SINGLE_BASELINE_NOTE = (
    "one baseline run: run-to-run variation (a server's warm state, the machine) is not "
    "counted in these tests, only the noise within each run; pass several baseline runs to "
    "count it"
)


def judged(
    rows: list[dict[str, Any]],
    confidence: float,
    notes: list[str],
    primary: family.Primary | None = None,
) -> Comparison:
    """The verdict over a family of rows (analysis.verdicts.family: Holm at 1 - confidence)."""
    family.decide(rows, confidence, primary)
    table = pd.DataFrame(rows)
    fam = family.describe(rows, confidence, primary)
    regressed = table[table["regression"].astype(bool)]
    if len(regressed):
        what = sorted({f"{r['metric']} at {r['load']}" for _, r in regressed.iterrows()})
        return Comparison(Exit.FAILED, "regression: " + ", ".join(what), table, notes, fam)
    return Comparison(Exit.PASSED, "no significant regression", table, notes, fam)


def errors(df: pd.DataFrame) -> tuple[int, int]:
    steady = (df["phase"] == "steady").to_numpy()
    return int(steady.sum()), int((steady & (df["outcome"] != "ok").to_numpy()).sum())


def ok_steady(df: pd.DataFrame) -> np.ndarray:
    return ((df["outcome"] == "ok") & (df["phase"] == "steady")).to_numpy()


def _token_var(df: pd.DataFrame, window_s: float) -> float:
    if not window_s:
        return math.nan
    # every steady request's tokens: a compound-Poisson approximation of the variance of the
    # tokens that arrived inside the window (analysis.metrics.output_token_rate)
    tok = df["output_tokens"].to_numpy(dtype=np.float64)[(df["phase"] == "steady").to_numpy()]
    return float(np.sum(tok**2)) / window_s**2


def row(
    metric: str,
    base: float,
    cand: float,
    p: tuple[float, float],
    test: str,
    n_base: int,
    n_cand: int,
    *,
    beyond_worse: bool,
    beyond_better: bool,
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
        "p_worse": p[0] if p[0] == p[0] else None,
        "p_better": p[1] if p[1] == p[1] else None,
        "p_value": p[0] if p[0] == p[0] else None,
        "test": test,
        "n_base": n_base,
        "n_cand": n_cand,
        "unit": "request",
        "beyond_worse": beyond_worse,
        "beyond_better": beyond_better,
    }
