"""The saturation search: runs levels one at a time, decides each on every criterion the exit
verdict applies, by the same rules (`judge`: the SLOs as `peakload sla` decides them, the error
budget, the load shortfall) from the samples its steady requests gave (loadgen/engine/samples.py: a
failed or unsent request is a miss of every SLO), runs a level not yet decided again (samples
pooled) up to a bound, and lets `schedule.saturation_levels` pick the next load.

The answer (`search_answer`): the highest load whose verdict is "pass", the next load above it
that did not pass (with its verdict), and the confidence they were decided at.

Several shards make one search when they share a `SamplePool`: after each level every shard
hands in its samples and gets back everyone's, so all of them judge the same pooled samples,
reach the same verdict and run the same next level (loadgen/engine/pool.py). A distributed pool may
close without a shard that died or came too late: every shard then judges the same closed set,
and the answer says the pool was incomplete and which shards were missing. Without a pool a
shard searches on its own samples.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from loadgen.engine.levels import LevelResult, drain, level_result, next_level_start, run_level
from loadgen.engine.pool import SamplePool
from loadgen.engine.samples import DELIVERED, ITL_COUNTS, OUTCOMES, SAMPLE_KEYS, TOKEN_METRICS
from loadgen.engine.schedule import saturation_levels, search_level
from loadgen.engine.shard import NS, Shard
from loadgen.results.binomial import Verdict, decide, decide_error_budget, fail_p_value
from loadgen.results.clustered import RULE as CLUSTERED_RULE
from loadgen.results.clustered import decide_clustered
from loadgen.results.multiple import holm_own_alpha
from loadgen.results.shortfall import is_short, rate_shortfall
from loadgen.runspec.spec import RunSpec


def judge(
    spec: RunSpec, samples: dict[str, list[float]], confidence: float
) -> tuple[Verdict, list[dict[str, Any]]]:
    """The level's verdict on every criterion the exit verdict applies
    (analysis/verdicts/verdict.py), by the same rules: one entry per SLO (n, k exceedances:
    samples >= the threshold, as `peakload sla` counts them; a token-level SLO with the request
    as the unit, loadgen/results/clustered.py, its n the requests and `tokens` beside it), the error
    budget (`max_error_rate`, loadgen.results.binomial.decide_error_budget) and the load delivered
    (loadgen/results/shortfall.py: steady requests sent inside the steady window of those scheduled;
    short by more than `[validity] max_load_shortfall` is undecidable). The level fails if any
    criterion fails, passes if every one passes, else is not yet decided."""
    per: list[dict[str, Any]] = []
    for slo in spec.slos:
        vals = np.asarray(samples.get(slo.metric) or [], dtype=np.float64)
        entry: dict[str, Any] = {
            "metric": slo.metric,
            "percentile": slo.percentile,
            "threshold": slo.threshold,
        }
        if slo.metric in TOKEN_METRICS:
            d = decide_clustered(
                *_per_request(vals, samples.get(ITL_COUNTS) or [], slo.threshold),
                slo.percentile,
                confidence,
            )
            entry.update(n=d.requests, tokens=d.tokens, exceedances=d.exceedances)
            entry.update(verdict=d.verdict, p_fail=d.p_fail)
        else:
            n, k = int(vals.size), int((vals >= slo.threshold).sum())
            entry.update(n=n, exceedances=k, verdict=decide(n, k, slo.percentile, confidence))
            entry["p_fail"] = fail_p_value(n, k, 1.0 - slo.percentile / 100.0)
        per.append(entry)
    ok = np.asarray(samples.get(OUTCOMES) or [], dtype=np.float64)
    n, k, e0 = int(ok.size), int((ok == 0.0).sum()), spec.max_error_rate
    per.append(
        {
            "metric": "error_rate",
            "threshold": e0,
            "n": n,
            "exceedances": k,
            "verdict": decide_error_budget(n, k, e0, confidence),
            # None when the budget is off: no test (the level's JSON is stored, so no NaN)
            "p_fail": fail_p_value(n, k, e0) if e0 < 1.0 else None,
        }
    )
    sent = np.asarray(samples.get(DELIVERED) or [], dtype=np.float64)
    short = rate_shortfall(int(sent.size), int(sent.sum()))
    bound = spec.validity.max_load_shortfall
    per.append(
        {
            "metric": "load_shortfall",
            "threshold": bound,
            "n": int(sent.size),
            "observed": short,
            "verdict": "insufficient samples" if is_short(short, bound) else "pass",
        }
    )
    _fails_under_holm(per, 1.0 - confidence)
    verdicts = {p["verdict"] for p in per}
    if "fail" in verdicts:
        return "fail", per
    if verdicts == {"pass"}:
        return "pass", per
    return "insufficient samples", per


def _fails_under_holm(per: list[dict[str, Any]], alpha: float) -> None:
    """A fail must survive Holm over the level's fail-side tests, as in the exit verdict
    (analysis/verdicts/fail_family.py): one that does not is not yet decided (in place)."""
    tests = [p for p in per if p.get("p_fail") is not None]
    adjusted = holm_own_alpha([p["p_fail"] for p in tests], [alpha] * len(tests))
    for p, p_adj in zip(tests, adjusted, strict=True):
        if p["verdict"] == "fail" and not p_adj <= alpha:
            p["verdict"] = "insufficient samples"


def _per_request(
    values: np.ndarray, counts: list[float], threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """(m_i, k_i) per request from the pooled per-token samples and each request's count."""
    m = np.asarray(counts, dtype=np.int64)
    if int(m.sum()) != values.size:
        raise ValueError("itl_ms samples and their per-request counts disagree")
    owner = np.repeat(np.arange(m.size), m)
    k = np.bincount(owner, weights=(values >= threshold), minlength=m.size)
    return m.astype(np.float64), k


def search_answer(decided: list[tuple[float, Verdict]], confidence: float) -> dict[str, Any]:
    """From each tried load's final verdict: {"highest_passing", "next_failing", "next_verdict",
    "confidence", "rule", "tried": [{"value", "verdict"}]}. Loads in the search's units (req/s
    for the whole run)."""
    passing = [v for v, d in decided if d == "pass"]
    best = max(passing) if passing else None
    above = sorted((v, d) for v, d in decided if d != "pass" and (best is None or v > best))
    nxt = above[0] if above else None
    return {
        "highest_passing": best,
        "next_failing": nxt[0] if nxt else None,
        "next_verdict": nxt[1] if nxt else None,
        "confidence": confidence,
        "rule": "as peakload sla and the exit verdict: exact binomial "
        f"(loadgen/results/binomial.py); token-level SLOs {CLUSTERED_RULE} "
        "(loadgen/results/clustered.py); error budget; load shortfall",
        "tried": [{"value": v, "verdict": d} for v, d in decided],
    }


async def run_search(
    r: Shard, start: int, done: list[LevelResult], pool: SamplePool | None = None
) -> dict[str, Any]:
    """Levels chosen one at a time from `start` (monotonic ns): each drains (bounded by the
    request deadline) before it is judged, so its verdict has all its samples (with `pool`,
    every shard's); a load not yet decided runs again as the next level, up to
    `saturation.max_extensions` times. Returns the answer (`search_answer`), also kept in
    `r.search` as it grows, so a stopped search keeps it; with `pool`, also "pool_complete"
    (every level run's pool had every shard's samples) and "missing_shards" (those it lacked),
    and each level's decision records its pool's shards and missing ones."""
    spec = r.spec
    sat = spec.load.saturation
    assert sat is not None
    t0 = start
    history: list[tuple[float, bool]] = []
    decided: list[tuple[float, Verdict]] = []
    missing: set[str] = set()  # shards some level's pool closed without
    r.search = search_answer(decided, sat.confidence)
    i = 0
    while (
        value := saturation_levels(sat.start, sat.max, history, sat.max_steps, sat.tolerance)
    ) is not None:
        pooled: dict[str, list[float]] = {name: [] for name in SAMPLE_KEYS}
        verdict: Verdict = "insufficient samples"
        for run in range(1 + sat.max_extensions):
            lvl = search_level(spec.load, i, value)
            i += 1
            try:
                w = await run_level(r, lvl, t0)
            except asyncio.CancelledError:
                if r.window is not None and r.window.level is lvl:
                    done.append(level_result(r, r.window, stopped=r.clock()))
                raise
            drained = await drain(r, w.end + int(spec.target.deadline_s * NS))
            res = level_result(r, w)
            if drained:
                res.drained_wall_ns = r.wall(r.clock())
            assert w.samples is not None
            res.search = {"value": value, "run": run}
            done.append(res)  # kept (undecided) if the shard stops while the pool waits
            mine = w.samples
            got = None
            if pool is not None:
                got = await pool.pool(i - 1, r.plan.shard_id, w.samples)
                mine = got.samples
                res.search["pool"] = {"shards": list(got.shards), "missing": list(got.missing)}
                missing.update(got.missing)
            for name, vals in mine.items():
                pooled.setdefault(name, []).extend(vals)
            verdict, per = judge(spec, pooled, sat.confidence)
            res.met_slos = verdict == "pass"
            res.search.update(verdict=verdict, slos=per)
            t0 = next_level_start(r, w.end, got)
            if verdict != "insufficient samples":
                break
        history.append((value, verdict == "pass"))
        decided.append((value, verdict))
        r.search = search_answer(decided, sat.confidence)
        r.search["pooled"] = pool is not None
        if pool is not None:
            r.search["pool_complete"] = not missing
            r.search["missing_shards"] = sorted(missing)
    return r.search
