"""The saturation search: runs levels one at a time, decides each against the SLOs with the exact
binomial rule of `peakload sla` (loadgen/binomial.py) from the samples its steady requests gave
(a failed or unsent request is a miss of every SLO), runs a level not yet decided again (samples
pooled) up to a bound, and lets `schedule.saturation_levels` pick the next load.

The answer (`search_answer`): the highest load whose verdict is "pass", the next load above it
that did not pass (with its verdict), and the confidence they were decided at.

Several shards make one search when they share a `SamplePool`: after each level every shard
hands in its samples and gets back everyone's, so all of them judge the same pooled samples,
reach the same verdict and run the same next level (loadgen/pool.py). A distributed pool may
close without a shard that died or came too late: every shard then judges the same closed set,
and the answer says the pool was incomplete and which shards were missing. Without a pool a
shard searches on its own samples.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from loadgen.binomial import Verdict, decide
from loadgen.fold import SAMPLED
from loadgen.levels import LevelResult, drain, level_result, run_level
from loadgen.pool import SamplePool
from loadgen.schedule import Level, saturation_levels
from loadgen.shard import NS, Shard
from loadgen.spec import RunSpec


def judge(
    spec: RunSpec, samples: dict[str, list[float]], confidence: float
) -> tuple[Verdict, list[dict[str, Any]]]:
    """The level's verdict and one entry per SLO: n samples, k exceedances (samples >= the
    threshold, as `peakload sla` counts them), its verdict. The level fails if any SLO fails,
    passes if every SLO passes, else is not yet decided ("insufficient samples")."""
    per: list[dict[str, Any]] = []
    for slo in spec.slos:
        vals = np.asarray(samples.get(slo.metric) or [], dtype=np.float64)
        n, k = int(vals.size), int((vals >= slo.threshold).sum())
        per.append(
            {
                "metric": slo.metric,
                "percentile": slo.percentile,
                "threshold": slo.threshold,
                "n": n,
                "exceedances": k,
                "verdict": decide(n, k, slo.percentile, confidence),
            }
        )
    verdicts = {p["verdict"] for p in per}
    if "fail" in verdicts:
        return "fail", per
    if verdicts == {"pass"}:
        return "pass", per
    return "insufficient samples", per


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
        "rule": "exact binomial, as peakload sla (loadgen/binomial.py)",
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
        pooled: dict[str, list[float]] = {name: [] for name in SAMPLED}
        verdict: Verdict = "insufficient samples"
        for run in range(1 + sat.max_extensions):
            lvl = Level(
                i, "rate", value, spec.load.duration_s, spec.load.warmup_s, spec.load.cooldown_s
            )
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
            t0 = max(w.end, r.clock())
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
