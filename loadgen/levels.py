"""One load level: its window on the monotonic clock, this shard's share of its load (users or
rate), and the load model that drives it until the window ends.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from loadgen.loadmodels import closed_loop_user, open_loop
from loadgen.schedule import Level, load_trace, open_loop_offsets, static_levels, trace_share
from loadgen.shard import NS, LevelWindow, Shard


@dataclass(slots=True)
class LevelResult:
    index: int
    kind: str
    value: float
    duration_s: float
    warmup_s: float
    cooldown_s: float
    started_wall_ns: int
    ended_wall_ns: int
    met_slos: bool | None = None


async def run_levels(r: Shard, start: int, done: list[LevelResult]) -> None:
    """The spec's levels one after another from `start` (monotonic ns); each appended to `done`
    as it ends."""
    t0 = start
    for lvl in static_levels(r.spec.load):
        w = await run_level(r, lvl, t0)
        done.append(level_result(r, w))
        t0 = w.end


async def run_level(shard: Shard, level: Level, start: int) -> LevelWindow:
    window = LevelWindow(level, start, start + int(level.duration_s * NS))
    if shard.spec.load.saturation is not None:
        window.samples = {
            "ttft_ms": [],
            "tpot_ms": [],
            "itl_ms": [],
            "e2e_ms": [],
            "ttfat_ms": [],
        }
    shard.level_index = level.index
    p, load = shard.plan, shard.spec.load
    seed = int(np.random.default_rng([p.seed, level.index]).integers(0, 2**62))
    if level.kind == "concurrency":
        users = p.users_per_level[level.index] if level.index < len(p.users_per_level) else 0
        tasks = [asyncio.create_task(closed_loop_user(shard, window, u)) for u in range(users)]
        for tk in tasks:
            shard.in_flight.add(tk)
            tk.add_done_callback(shard.in_flight.discard)
        await shard.sleep_until(window.end)
        return window
    if level.kind == "trace":
        assert load.trace is not None
        entries = load_trace(load.trace)
        lo = float(p.extra.get("fraction_lo", 0.0))
        mine = [entries[i] for i in trace_share(len(entries), load.seed, lo, lo + p.fraction)]
        await open_loop(shard, window, (e.t_s for e in mine), mine)
    else:
        r0 = level.value * p.fraction
        r1 = (level.ramp_to if level.ramp_to is not None else level.value) * p.fraction
        if r0 > 0 or r1 > 0:
            offs = open_loop_offsets(
                load.arrival, load.burstiness, r0, r1, level.duration_s, seed, p.max_requests
            )
            await open_loop(shard, window, offs)
    await shard.sleep_until(window.end)
    return window


def level_result(r: Shard, w: LevelWindow) -> LevelResult:
    lv = w.level
    return LevelResult(
        lv.index,
        lv.kind,
        lv.value,
        lv.duration_s,
        lv.warmup_s,
        lv.cooldown_s,
        r.wall(w.start),
        r.wall(w.end),
    )


async def drain(r: Shard, until: int) -> bool:
    """Wait for in-flight requests to finish by `until` (monotonic ns); True if they did."""
    while r.in_flight:
        left = (until - r.clock()) / NS
        if left <= 0:
            return False
        await asyncio.wait(set(r.in_flight), timeout=left)
    return True
