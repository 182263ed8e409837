"""The saturation search: runs levels one at a time, judges each against the SLOs from the
samples its requests gave, and lets `schedule.saturation_levels` pick the next load.
"""

from __future__ import annotations

import asyncio

import numpy as np

from loadgen.levels import LevelResult, drain, level_result, run_level
from loadgen.schedule import Level, saturation_levels
from loadgen.shard import NS, Shard
from loadgen.spec import RunSpec


def meets_slos(spec: RunSpec, samples: dict[str, list[float]]) -> bool:
    for slo in spec.slos:
        vals = samples.get(slo.metric) or []
        if not vals or float(np.percentile(vals, slo.percentile)) > slo.threshold:
            return False
    return True


async def run_search(r: Shard, start: int, done: list[LevelResult]) -> None:
    """Levels chosen one at a time from `start` (monotonic ns): each drains (bounded by the
    request deadline) before it is judged, so its verdict has all its samples."""
    spec = r.spec
    sat = spec.load.saturation
    assert sat is not None
    t0 = start
    history: list[tuple[float, bool]] = []
    i = 0
    while (
        value := saturation_levels(sat.start, sat.max, history, sat.max_steps, sat.tolerance)
    ) is not None:
        lvl = Level(
            i, "rate", value, spec.load.duration_s, spec.load.warmup_s, spec.load.cooldown_s
        )
        try:
            w = await run_level(r, lvl, t0)
        except asyncio.CancelledError:
            if r.window is not None and r.window.level is lvl:
                done.append(level_result(r, r.window, stopped=r.clock()))
            raise
        drained = await drain(r, w.end + int(spec.target.deadline_s * NS))
        assert w.samples is not None
        met = meets_slos(spec, w.samples)
        history.append((value, met))
        res = level_result(r, w)
        if drained:
            res.drained_wall_ns = r.wall(r.clock())
        res.met_slos = met
        done.append(res)
        t0 = max(w.end, r.clock())
        i += 1
