"""A stored run judged against its own spec's criteria: the `[[slos]]` as SLA claims and the
error budget `max_error_rate`, both decided by the exact binomial rule of analysis.verdicts.sla, and
the run's state (partial, invalid, empty) first. This is what `run`, `submit` and `sla` exit with.

The error budget is a claim on the failure fraction of the steady-phase requests: with
e0 = max_error_rate, n steady requests (every outcome, `not_sent` included: a request the run
scheduled and lost) and k of them not ok, it passes when P(Binomial(n, e0) <= k) <= 1 - C, fails
when P(Binomial(n, e0) >= k) <= 1 - C, else it lacks samples: with no failure, 459 requests
prove a 1% budget at 99% confidence. e0 = 0 allows no failure (pass iff k = 0); e0 = 1 turns
the budget off.
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
from analysis.verdicts.exitcodes import Exit, run_state_code
from loadgen.spec import DEFAULT_MAX_ERROR_RATE

ERROR_METRIC = "error_rate"


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
    return Criteria(
        claims=claims,
        max_error_rate=float(spec.get("max_error_rate", DEFAULT_MAX_ERROR_RATE)),
        confidence=float(spec.get("confidence") or sla.DEFAULT_CONFIDENCE),
        saturation=load.get("saturation") is not None,
    )


def error_budget(df: pd.DataFrame, max_error_rate: float, confidence: float) -> sla.ClaimVerdict:
    """The error budget's verdict over `df`'s steady-phase requests (module docstring)."""
    steady = (df["phase"] == "steady").to_numpy()
    n = int(steady.sum())
    k = int((steady & (df["outcome"] != "ok").to_numpy()).sum())
    e0 = float(max_error_rate)
    lo, hi = sla.clopper_pearson(n, k, confidence)
    if e0 >= 1.0:
        verdict: sla.Verdict = "pass"
    elif e0 <= 0.0:
        verdict = "pass" if n > 0 and k == 0 else "fail" if k > 0 else "insufficient samples"
    else:
        verdict = sla.decide(n, k, 100.0 * (1.0 - e0), confidence)
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
        p_pass=sla.pass_p_value(n, k, e0),
        p_fail=sla.fail_p_value(n, k, e0),
        samples_needed=needed,
    )


@dataclass(slots=True)
class RunJudgement:
    """A run's exit code, why, and the verdicts behind it (also printed when the state already
    decided the code: an invalid run still shows what its numbers say)."""

    code: Exit
    reason: str
    verdicts: list[sla.ClaimVerdict] = field(default_factory=list)
    level: int | None = None  # the level judged (saturation searches), else None: all pooled

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": int(self.code),
            "verdict": self.code.name.lower(),
            "reason": self.reason,
            "level": self.level,
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
) -> RunJudgement:
    """`run` (analysis.store.load.load_run) and its requests against `criteria` (default: its own
    spec's). A saturation search is judged at its best level: the highest configured load
    whose criteria pass (else the lowest code over its levels)."""
    crit = criteria if criteria is not None else criteria_from_spec(_spec(run))
    gate = state_gate(run, df)
    if crit.saturation and levels is not None and len(levels) and gate is None:
        return _best_level(df, levels, crit)
    verdicts = _evaluate(df, crit)
    if gate is not None:
        return RunJudgement(gate[0], gate[1], verdicts)
    code = sla.exit_code(verdicts)
    return RunJudgement(code, _why(code, verdicts), verdicts)


def judge_claims(
    run: Mapping[str, Any],
    df: pd.DataFrame,
    claims: sla.ClaimsFile,
    *,
    confidence: float | None = None,
    chunks: m.ChunkArrays | None = None,
) -> RunJudgement:
    """`peakload sla` and `report --claims`: the claims file's claims and an error budget (the
    file's `max_error_rate`, else the run spec's), after the run's state (`state_gate`)."""
    own = criteria_from_spec(_spec(run))
    conf = confidence or claims.confidence
    budget = claims.max_error_rate if claims.max_error_rate is not None else own.max_error_rate
    verdicts = [
        *sla.evaluate(df, claims, confidence=confidence, chunks=chunks),
        error_budget(df, budget, conf),
    ]
    gate = state_gate(run, df)
    if gate is not None:
        return RunJudgement(gate[0], gate[1], verdicts)
    code = sla.exit_code(verdicts)
    return RunJudgement(code, _why(code, verdicts), verdicts)


def _evaluate(df: pd.DataFrame, crit: Criteria) -> list[sla.ClaimVerdict]:
    out = sla.evaluate(df, list(crit.claims), confidence=crit.confidence) if crit.claims else []
    return [*out, error_budget(df, crit.max_error_rate, crit.confidence)]


def _best_level(df: pd.DataFrame, levels: pd.DataFrame, crit: Criteria) -> RunJudgement:
    judged = []
    for _, lv in levels.sort_values("value").iterrows():
        sub = df[(df["level"] == lv["level"]).to_numpy()]
        verdicts = _evaluate(sub, crit)
        judged.append((int(lv["level"]), float(lv["value"]), sla.exit_code(verdicts), verdicts))
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
    return f"{want}: " + ", ".join(names)


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
