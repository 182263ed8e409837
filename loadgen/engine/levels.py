"""One load level: its window on the monotonic clock, this shard's share of its load (users or
rate), and the load model that drives it until the window ends.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.engine.loadmodels import SPAWN_INTERVAL_NS, closed_loop_user, open_loop
from loadgen.engine.plan import ShardPlan
from loadgen.engine.pool import Pooled, SamplePool
from loadgen.engine.samples import SAMPLE_KEYS
from loadgen.engine.schedule import (
    Level,
    TraceEntry,
    open_loop_offsets,
    search_level,
    static_levels,
    trace_share,
)
from loadgen.engine.shard import NS, LevelWindow, Shard
from loadgen.engine.traces import trace_entries
from loadgen.results.reasons import LEVEL_ENDED
from loadgen.runspec.load_spec import LoadSpec

SPAWN_LEAD_NS = 50_000_000  # a user is created this long before its start: its prompt is ready
# After a pool closes, the shards start their next level this long after the close (on the run's
# reference clock): long enough for every one of them to see it (64 shards on 2 cores took up to
# 0.6 s to, bench/fleet.py), so they start together rather than each when it happened to look.
NEXT_LEVEL_LEAD_NS = 500_000_000
# A shard of a fleet wakes for the run's start this long before its own first send (its
# runner's first steps fit in it), within this span after the start (before its first tick)
WAKE_LEAD_NS = 5_000_000
WAKE_SPAN_NS = 900_000_000


@dataclass(slots=True)
class LevelResult:
    """A level as it ran, on the wall clock (ns since the epoch). `steady_*` is the window its
    throughput divides by: start + warmup to end - cooldown, cut at the moment the shard
    stopped if it stopped early; `drained_wall_ns` when its last request ended (None if it did
    not drain); `search` the saturation search's decision, if any."""

    index: int
    kind: str
    value: float
    duration_s: float
    warmup_s: float
    cooldown_s: float
    started_wall_ns: int
    ended_wall_ns: int
    steady_start_wall_ns: int = 0
    steady_end_wall_ns: int = 0
    drained_wall_ns: int | None = None
    between_levels: str = "drain"
    met_slos: bool | None = None
    search: dict[str, Any] | None = None


async def run_levels(
    r: Shard, start: int, done: list[LevelResult], pool: SamplePool | None = None
) -> None:
    """The spec's levels one after another from `start` (monotonic ns); each appended to `done`
    as it ends (or, cut at the stop, when the shard stops during it). Between two levels,
    `load.between_levels` decides what happens to the first one's requests still running; with
    `pool` (the other shards of the run) a drained shard waits for the others before its next
    level, so no shard's level overlaps another's."""
    t0 = start
    policy = r.spec.load.between_levels
    levels = static_levels(r.spec.load)
    for i, lvl in enumerate(levels):
        try:
            w = await run_level(r, lvl, t0)
        except asyncio.CancelledError:
            if r.window is not None and r.window.level is lvl:
                done.append(level_result(r, r.window, stopped=r.clock(), policy=policy))
            raise
        res = level_result(r, w, policy=policy)
        done.append(res)
        t0 = w.end
        if i == len(levels) - 1:
            break  # the shard's own end drains or cancels the last level
        if policy == "drain":
            if await drain(r, w.end + int(r.spec.target.deadline_s * NS)):
                res.drained_wall_ns = r.wall(r.clock())
            else:
                await cancel_in_flight(r, LEVEL_ENDED)
            t0 = max(w.end, r.clock())
        elif policy == "cancel":
            await cancel_in_flight(r, LEVEL_ENDED)
            res.drained_wall_ns = r.wall(r.clock())
            t0 = max(w.end, r.clock())
        if pool is not None and policy != "overlap":
            t0 = next_level_start(r, w.end, await pool.pool(lvl.index, r.plan.shard_id, {}))


def next_level_start(r: Shard, level_end: int, got: Pooled | None) -> int:
    """When the shard's next level begins (monotonic ns): at this one's end, or now if that
    has passed; after a pool that closed at a known instant (`Pooled.closed_at_ref_ns`), not
    before NEXT_LEVEL_LEAD_NS after it, the same instant for every shard of the run."""
    t0 = max(level_end, r.clock())
    if got is not None and got.closed_at_ref_ns is not None:
        t0 = max(t0, r.mono(got.closed_at_ref_ns + NEXT_LEVEL_LEAD_NS))
    return t0


async def cancel_in_flight(r: Shard, reason: str) -> None:
    """End every request (and closed-loop user) still running: each gets its `cancelled` record
    with the tokens it had received, `error_phase` = `reason`."""
    tasks = list(r.in_flight)
    if not tasks:
        return
    before = r.stop_reason
    r.stop_reason = reason
    try:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        if r.stop_reason == reason:  # unless the shard began to stop meanwhile
            r.stop_reason = before


async def run_level(shard: Shard, level: Level, start: int) -> LevelWindow:
    window = LevelWindow(level, start, start + int(level.duration_s * NS))
    shard.window = window
    if shard.spec.load.saturation is not None:
        window.samples = {name: [] for name in SAMPLE_KEYS}
    shard.level_index = level.index
    p, load = shard.plan, shard.spec.load
    if level.kind == "concurrency":
        users = p.users_per_level[level.index] if level.index < len(p.users_per_level) else 0
        # Users are created as their start comes near, not all up front: memory follows the
        # users started, and one whose start falls past the level's end is never made.
        users = min(users, (window.end - window.start - 1) // SPAWN_INTERVAL_NS + 1)
        spawned = 0
        while spawned < users and not shard.stopping:
            ahead = shard.clock() + SPAWN_LEAD_NS - window.start
            due = min(users, ahead // SPAWN_INTERVAL_NS + 1) if ahead >= 0 else 0
            for u in range(spawned, due):
                shard.track(asyncio.create_task(closed_loop_user(shard, window, u)))
            spawned = max(spawned, due)
            next_start = window.start + spawned * SPAWN_INTERVAL_NS
            if spawned >= users or next_start >= window.end:
                break
            await shard.sleep_until(next_start - SPAWN_LEAD_NS)
        await shard.sleep_until(window.end)
        return window
    offsets, forced = open_loop_sends(p, load, level)
    await open_loop(shard, window, offsets, forced)
    await shard.sleep_until(window.end)
    return window


def _level_seed(plan: ShardPlan, level: Level) -> int:
    return int(np.random.default_rng([plan.seed, level.index]).integers(0, 2**62))


def open_loop_sends(
    plan: ShardPlan, load: LoadSpec, level: Level
) -> tuple[Iterator[float], list[TraceEntry] | None]:
    """This shard's send offsets (s from the level's start) in an open-loop or trace `level`,
    and for a trace its entries (their lengths); no offsets at a rate of 0."""
    if level.kind == "trace":
        assert load.trace is not None
        entries = trace_entries(load)
        lo = float(plan.extra.get("fraction_lo", 0.0))
        mine = [entries[i] for i in trace_share(len(entries), load.seed, lo, lo + plan.fraction)]
        return (e.t_s for e in mine), mine
    r0 = level.value * plan.fraction
    r1 = (level.ramp_to if level.ramp_to is not None else level.value) * plan.fraction
    if r0 <= 0 and r1 <= 0:
        return iter(()), None
    offsets = open_loop_offsets(
        load.arrival,
        load.burstiness,
        r0,
        r1,
        level.duration_s,
        _level_seed(plan, level),
        plan.max_requests,
        phase=float(plan.extra.get("fraction_lo", 0.0)),
    )
    return offsets, None


def first_send_s(plan: ShardPlan, load: LoadSpec) -> float:
    """When this shard's first request is due, in s after the run's start: at 0 under a closed
    loop (its first user starts then), else its first level's first send offset (an open-loop
    shard's phase puts the shards of one rate one after another, not all at the start; inf when
    the level sends nothing). The level is the first static one, or a search's first try."""
    levels = static_levels(load)
    if load.saturation is not None:
        first = search_level(load, 0, load.saturation.start)
    elif levels:
        first = levels[0]
    else:
        return 0.0
    if first.kind == "concurrency":
        return 0.0
    offsets, _ = open_loop_sends(plan, load, first)
    return next(offsets, math.inf)


def level_result(
    r: Shard, w: LevelWindow, *, stopped: int | None = None, policy: str = "drain"
) -> LevelResult:
    """`w` as run; `stopped` (monotonic ns) cuts its span and steady window where the shard
    stopped, so an aborted level's rates divide by the time it really ran."""
    lv = w.level
    end = w.end if stopped is None else min(w.end, stopped)
    s0 = w.start + int(lv.warmup_s * NS)
    s1 = w.end - int(lv.cooldown_s * NS)
    if stopped is not None:
        s1 = min(s1, stopped)
    return LevelResult(
        lv.index,
        lv.kind,
        lv.value,
        lv.duration_s,
        lv.warmup_s,
        lv.cooldown_s,
        r.wall(w.start),
        r.wall(end),
        r.wall(s0),
        r.wall(max(s0, s1)),
        between_levels=policy,
    )


async def drain(r: Shard, until: int) -> bool:
    """Wait for in-flight requests to finish by `until` (monotonic ns); True if they did."""
    while r.in_flight:
        left = (until - r.clock()) / NS
        if left <= 0:
            return False
        await asyncio.wait(set(r.in_flight), timeout=left)
    return True


def wake_offset_ns(plan: ShardPlan, load: LoadSpec) -> int:
    """How long after the run's start instant this shard wakes for it: WAKE_LEAD_NS before its
    first send (`first_send_s`); at the instant under a closed loop, when that send is sooner,
    or when the first level sends nothing; a send due past WAKE_SPAN_NS has its time folded
    into that span (the shards' wakes as spread as their first sends). The shards of a host,
    each woken for its own first send, do not all wake at one instant and take the cores from
    each other (64 on 2 cores: tens of ms for the last to wake); every send is scheduled from
    the start either way."""
    due_s = first_send_s(plan, load)
    if not math.isfinite(due_s):
        return 0
    return max(0, int(due_s * NS) - WAKE_LEAD_NS) % WAKE_SPAN_NS
