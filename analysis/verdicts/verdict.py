"""A stored run judged against its own spec's criteria: the `[[slos]]` as SLA claims and the
error budget `max_error_rate`, both decided by the exact binomial rule of analysis.verdicts.sla, and
the run's state (partial, invalid, empty) first. This is what `run`, `submit` and `sla` exit with.

A sweep's claims are judged at each load it ran (analysis.verdicts.loads: a pass needs every
load to pass), the error budget over all its steady requests (it is the run's budget), and a
fail must survive Holm over every test of the verdict (analysis.verdicts.fail_family).

The error budget is a claim on the failure fraction of the steady-phase requests: with
e0 = max_error_rate, n steady requests (every outcome, `not_sent` included: a request the run
scheduled and lost; not those peakload itself stopped, loadgen.results.reasons) and k of them not
ok, it passes when P(Binomial(n, e0) <= k) <= 1 - C, fails when P(Binomial(n, e0) >= k) <= 1 - C,
else it lacks samples: with no failure, 459 requests prove a 1% budget at 99% confidence.
e0 = 0 allows no failure (pass iff k = 0); e0 = 1 turns the budget off.

A level that did not deliver its load (analysis.verdicts.delivered: short of what its schedule
asked by more than `[validity] max_load_shortfall`) makes the claims judged on it undecidable
unless one fails anyway: a "load delivered" criterion beside them. A saturation search is judged
the same way level by level, as the search itself judges (loadgen/engine/search.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.verdicts import sla
from analysis.verdicts.delivered import Delivered, levels_delivered, pooled, shortfall_bound
from analysis.verdicts.exitcodes import Exit, run_state_code
from analysis.verdicts.fail_family import adjust_fails
from analysis.verdicts.loads import claims_at_each_load, run_loads, spread_over
from loadgen.results.binomial import decide_error_budget
from loadgen.runspec.spec import DEFAULT_MAX_ERROR_RATE

ERROR_METRIC = "error_rate"
LOAD_METRIC = "load_shortfall"


@dataclass(frozen=True, slots=True)
class Criteria:
    """What a run must show to pass: SLA claims, an error budget, one confidence."""

    claims: tuple[sla.Claim, ...]
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    confidence: float = sla.DEFAULT_CONFIDENCE
    saturation: bool = False  # a search: judged at the best level, not pooled over all


def criteria_from_spec(spec: Mapping[str, Any] | None) -> Criteria:
    """The criteria of a stored spec (`runs.spec`, RunSpec.public_dict()); specs stored before
    the error budget existed get the defaults."""
    spec = spec or {}
    claims = tuple(
        sla.Claim(metric=s["metric"], percentile=s["percentile"], threshold=s["threshold"])
        for s in spec.get("slos") or []
    )
    load = spec.get("load") or {}
    sat = load.get("saturation")
    # a search decided its levels at its own confidence: its exit verdict judges at the same
    conf = (sat.get("confidence") if isinstance(sat, Mapping) else None) or spec.get("confidence")
    return Criteria(
        claims=claims,
        max_error_rate=float(spec.get("max_error_rate", DEFAULT_MAX_ERROR_RATE)),
        confidence=float(conf or sla.DEFAULT_CONFIDENCE),
        saturation=sat is not None,
    )


def error_budget(df: pd.DataFrame, max_error_rate: float, confidence: float) -> sla.ClaimVerdict:
    """The error budget's verdict over `df`'s steady-phase requests (module docstring), leaving
    out those peakload itself stopped (an abort, its time limit: loadgen.results.reasons), which are
    never a failure of the server."""
    stopped = sla.stopped_rows(df)
    steady = (df["phase"] == "steady").to_numpy()
    n_stopped = int((steady & stopped).sum())
    steady = steady & ~stopped
    n = int(steady.sum())
    k = int((steady & (df["outcome"] != "ok").to_numpy()).sum())
    e0 = float(max_error_rate)
    lo, hi = sla.clopper_pearson(n, k, confidence)
    verdict = decide_error_budget(n, k, e0, confidence)
    needed = sla.min_samples_to_pass(100.0 * (1.0 - e0), confidence, k) if 0 < e0 < 1 else n
    return sla.ClaimVerdict(
        claim=f"error rate <= {e0:.4g} (max_error_rate)",
        metric=ERROR_METRIC,
        percentile=100.0 * (1.0 - e0),
        threshold=e0,
        confidence=confidence,
        verdict=verdict,
        n=n,
        exceedances=k,
        observed=k / n if n else None,
        exceed_lower=lo,
        exceed_upper=hi,
        allowed=e0,
        # a budget turned off is no test: no p-value, not counted in the fail-side family
        p_pass=sla.pass_p_value(n, k, e0) if e0 < 1 else math.nan,
        p_fail=sla.fail_p_value(n, k, e0) if e0 < 1 else math.nan,
        samples_needed=needed,
        stopped=n_stopped,
    )


def load_delivered(delivered: Sequence[Delivered], bound: float) -> sla.ClaimVerdict | None:
    """The "load delivered" criterion over `delivered` (the levels judged): "insufficient
    samples" (undecidable) when one fell short by more than the bound, else "pass"; None when
    no level was judged (no levels on record)."""
    if not delivered:
        return None
    short = [d for d in delivered if d.short]
    worst = max((d.shortfall for d in delivered if d.shortfall is not None), default=None)
    verdict: sla.Verdict = "insufficient samples" if short else "pass"
    name = f"load delivered (shortfall <= {bound:.0%}, max_load_shortfall)"
    if short:
        name += ": " + "; ".join(d.reason() for d in short)
    return sla.ClaimVerdict(
        claim=name,
        metric=LOAD_METRIC,
        percentile=100.0 * (1.0 - bound),
        threshold=bound,
        confidence=1.0,
        verdict=verdict,
        n=len(delivered),
        exceedances=len(short),
        observed=worst,
        exceed_lower=0.0,
        exceed_upper=1.0,
        allowed=bound,
        p_pass=math.nan,
        p_fail=math.nan,
        samples_needed=0,
        rule="achieved vs the schedule's own arrivals (loadgen/results/shortfall.py)",
    )


@dataclass(slots=True)
class RunJudgement:
    """A run's exit code, why, and the verdicts behind it (also printed when the state already
    decided the code: an invalid run still shows what its numbers say)."""

    code: Exit
    reason: str
    verdicts: list[sla.ClaimVerdict] = field(default_factory=list)
    level: int | None = None  # the level judged (saturation searches), else None: all pooled
    loads: int = 1  # the loads each claim naming no level was judged at, one by one

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": int(self.code),
            "verdict": self.code.name.lower(),
            "reason": self.reason,
            "level": self.level,
            "loads": self.loads,
            "criteria": [v.to_json() for v in self.verdicts],
        }


def state_gate(run: Mapping[str, Any], df: pd.DataFrame) -> tuple[Exit, str] | None:
    """The code the run's state forces whatever its criteria say, with the reason: not
    completed (PARTIAL), flagged invalid (INVALID), no steady-phase request (UNDECIDABLE)."""
    status = run.get("status")
    valid = _bool_or_none(run.get("valid"))
    code = run_state_code(None if status is None else str(status), valid)
    if code is Exit.PARTIAL:
        why = run.get("status_reason")
        ended = "has not ended" if status in ("pending", "running") else f"is {status}"
        return code, f"the run {ended}" + (f": {why}" if _text(why) else "")
    if code is Exit.INVALID:
        reasons = "; ".join(str(r) for r in _list(run.get("invalid_reasons")))
        return code, "the measurement is invalid" + (f": {reasons}" if reasons else "")
    if not (df["phase"] == "steady").any():
        return Exit.UNDECIDABLE, "the run is empty: no request was scheduled in a steady phase"
    return None


def judge_run(
    run: Mapping[str, Any],
    df: pd.DataFrame,
    levels: pd.DataFrame | None = None,
    criteria: Criteria | None = None,
    *,
    chunks: m.ChunkArrays | None = None,
) -> RunJudgement:
    """`run` (analysis.store.load.load_run) and its requests against `criteria` (default: its own
    spec's). A sweep's claims are judged at each of its loads (analysis.verdicts.loads), the
    error budget over all its steady requests, fails under Holm over every test
    (analysis.verdicts.fail_family). A saturation search is judged at its best level: the
    highest configured load whose criteria pass (else the lowest code over its levels).
    `chunks`: the requests' chunk arrays when `df` has none (analysis.store.fastload), one
    entry per row of `df`."""
    crit = criteria if criteria is not None else criteria_from_spec(_spec(run))
    gate = state_gate(run, df)
    spec = _spec(run)
    if crit.saturation and levels is not None and len(levels) and gate is None:
        return _best_level(df, levels, crit, spec, chunks)
    load = load_delivered(levels_delivered(df, levels, spec), shortfall_bound(spec))
    loads = run_loads(df, levels) if crit.claims else []
    claims = claims_at_each_load(df, crit.claims, loads, confidence=crit.confidence, chunks=chunks)
    verdicts = adjust_fails([*claims, *([load] if load is not None else []), _budget(df, crit)])
    return _judgement(gate, verdicts, spread_over(crit.claims, loads))


def judge_claims(
    run: Mapping[str, Any],
    df: pd.DataFrame,
    claims: sla.ClaimsFile,
    *,
    confidence: float | None = None,
    chunks: m.ChunkArrays | None = None,
    levels: pd.DataFrame | None = None,
) -> RunJudgement:
    """`peakload sla` and `report --claims`: the claims file's claims and an error budget (the
    file's `max_error_rate`, else the run spec's), and with `levels` whether the levels the
    claims are on delivered their load (every level, unless every claim names one), after
    the run's state (`state_gate`). A claim naming no level is judged at each load, as in
    `judge_run`."""
    own = criteria_from_spec(_spec(run))
    conf = confidence or claims.confidence
    budget = claims.max_error_rate if claims.max_error_rate is not None else own.max_error_rate
    spec = _spec(run)
    on = {c.level for c in claims.claims}
    judged = [d for d in levels_delivered(df, levels, spec) if None in on or d.level in on]
    load = load_delivered(judged, shortfall_bound(spec))
    loads = run_loads(df, levels)
    verdicts = adjust_fails(
        [
            *claims_at_each_load(df, claims.claims, loads, confidence=conf, chunks=chunks),
            *([load] if load is not None else []),
            error_budget(df, budget, conf),
        ]
    )
    return _judgement(state_gate(run, df), verdicts, spread_over(claims.claims, loads))


def _judgement(
    gate: tuple[Exit, str] | None, verdicts: list[sla.ClaimVerdict], loads: int
) -> RunJudgement:
    """The run's state first (`state_gate`), else what the criteria say."""
    if gate is not None:
        return RunJudgement(gate[0], gate[1], verdicts, loads=loads)
    code = sla.exit_code(verdicts)
    return RunJudgement(code, _why(code, verdicts), verdicts, loads=loads)


def _budget(df: pd.DataFrame, crit: Criteria) -> sla.ClaimVerdict:
    return error_budget(df, crit.max_error_rate, crit.confidence)


def _evaluate(
    df: pd.DataFrame,
    crit: Criteria,
    load: sla.ClaimVerdict | None = None,
    chunks: m.ChunkArrays | None = None,
) -> list[sla.ClaimVerdict]:
    """The claims, the load delivered (if judged), the error budget (last)."""
    out = (
        sla.evaluate(df, list(crit.claims), confidence=crit.confidence, chunks=chunks)
        if crit.claims
        else []
    )
    out += [load] if load is not None else []
    return adjust_fails([*out, _budget(df, crit)])


def _best_level(
    df: pd.DataFrame,
    levels: pd.DataFrame,
    crit: Criteria,
    spec: Mapping[str, Any] | None,
    chunks: m.ChunkArrays | None = None,
) -> RunJudgement:
    """Each tried load (its levels pooled: the search runs a load it could not decide again and
    pools the samples, loadgen/engine/search.py) on every criterion, as the search judged it."""
    judged = []
    bound = shortfall_bound(spec)
    delivered = {d.level: d for d in levels_delivered(df, levels, spec)}
    for _, group in levels.groupby("value", sort=True):
        ids = [int(x) for x in group["level"]]
        rows = df["level"].isin(ids).to_numpy()
        load = load_delivered([pooled([delivered[i] for i in ids])], bound)
        verdicts = _evaluate(df[rows], crit, load, None if chunks is None else chunks.take(rows))
        value = float(group["value"].to_numpy(dtype=np.float64)[0])
        judged.append((min(ids), value, sla.exit_code(verdicts), verdicts))
    passing = [j for j in judged if j[2] is Exit.PASSED]
    undecided = [j for j in judged if j[2] is Exit.UNDECIDABLE]
    level, value, code, verdicts = (passing[-1:] or undecided[:1] or judged[:1])[0]
    why = (
        f"level {level} (load {value:g}) is the highest that meets the criteria"
        if code is Exit.PASSED
        else f"no level meets the criteria; level {level} (load {value:g}): " + _why(code, verdicts)
    )
    return RunJudgement(code, why, verdicts, level)


def _why(code: Exit, verdicts: Sequence[sla.ClaimVerdict]) -> str:
    if code is Exit.PASSED:
        return "every criterion passes"
    want = "fail" if code is Exit.FAILED else "insufficient samples"
    names = [v.claim for v in verdicts if v.verdict == want]
    tests = max((v.family or 0 for v in verdicts), default=0)
    held = [v.claim for v in verdicts if v.fail_held]
    why = f"{want}: " + ", ".join(names)
    if code is Exit.FAILED and tests > 1:
        why += f" (Holm over the run's {tests} fail-side tests)"
    elif held:
        why += (
            f" ({', '.join(held)}: disproved at its own confidence, not under Holm over the "
            f"run's {tests} fail-side tests)"
        )
    return why


def _spec(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = run.get("spec")
    return spec if isinstance(spec, Mapping) else None


def _bool_or_none(v: Any) -> bool | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return bool(v)


def _text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _list(v: Any) -> list[Any]:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    return list(v) if isinstance(v, list | tuple | np.ndarray) else [v]
