"""The runner: executes one shard plan. Runs its levels in order (or a saturation search),
sends every request at its absolute scheduled time through the load models, turns each scheduled
request into exactly one terminal record (loadgen/engine/fold.py), ticks once a second, and judges
its own health. Owns the shard's end: drain, abort, deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen.engine.levels import LevelResult, run_levels
from loadgen.engine.levels import drain as drain_in_flight
from loadgen.engine.plan import ShardPlan, Sink
from loadgen.engine.pool import SamplePool
from loadgen.engine.search import run_search
from loadgen.engine.shard import NS, Shard
from loadgen.results.records import Tick
from loadgen.target import Clock, Target


@dataclass(slots=True)
class ShardResult:
    shard_id: str
    status: str  # completed | aborted | timed_out
    requests_scheduled: int
    outcomes: dict[str, int]
    valid: bool
    invalid_reasons: list[str]
    started_wall_ns: int
    ended_wall_ns: int
    levels: list[LevelResult] = field(default_factory=list)
    health: dict[str, float] = field(default_factory=dict)
    # loadgen.engine.search.search_answer, saturation runs only
    search: dict[str, Any] | None = None


async def run_shard(
    plan: ShardPlan,
    target: Target,
    sink: Sink,
    *,
    start_at_mono_ns: int | None = None,
    begin_at_mono_ns: int | None = None,
    abort: asyncio.Event | None = None,
    on_tick: Callable[[Tick], None] | None = None,
    deadline_mono_ns: int | None = None,
    clock: Clock = time.perf_counter_ns,
    wall_clock: Callable[[], int] = time.time_ns,
    tokens_per_word: float = 1.0,
    pool: SamplePool | None = None,
    on_shard: Callable[[Shard], None] | None = None,
) -> ShardResult:
    """Run one shard to the end. Never raises for failed requests: each is a record.

    `start_at_mono_ns` (monotonic ns) is when the first level begins (every send is scheduled from
    it); `begin_at_mono_ns`, if later, when the shard starts its work (loop-lag probe, ticks,
    first level): under a second later, before its first send (`levels.wake_offset_ns`).
    `deadline_mono_ns` is a hard end (soft time limit) after which in-flight requests are
    cancelled and the shard is `timed_out`; setting `abort` cancels in-flight requests and ends
    it as `aborted`.
    `pool`, shared by the shards of one run: they meet after each level (so under `drain` and
    `cancel` every shard's next level starts once all have drained), and a saturation search is
    one search, decided on their pooled samples. `on_shard` is handed the shard's state once
    made, so a caller whose loop is stopped from outside (a Celery time limit) keeps what the
    shard had reached (its search so far).
    """
    abort = abort or asyncio.Event()
    r = Shard(
        plan,
        target,
        sink,
        clock=clock,
        abort=abort,
        on_tick=on_tick,
        tokens_per_word=tokens_per_word,
        wall_clock=wall_clock,
    )
    if on_shard is not None:
        on_shard(r)
    try:
        spec = r.spec
        start = start_at_mono_ns if start_at_mono_ns is not None else clock()
        status = "completed"
        levels_done: list[LevelResult] = []
        await r.sleep_until(max(start, begin_at_mono_ns or start))
        # the loop-lag probe from the start on, not before: until then the process has nothing to
        # measure, and a host's shards waiting for one instant would only take turns at the cores
        background = [asyncio.create_task(r.check.lag.run()), asyncio.create_task(r.ticker(start))]

        async def body() -> None:
            if spec.load.saturation is None:
                await run_levels(r, start, levels_done, pool)
            else:
                await run_search(r, start, levels_done, pool)

        main = asyncio.create_task(body())
        stop_abort = asyncio.create_task(abort.wait())
        waiters: set[asyncio.Future[Any]] = {main, stop_abort}
        timeout = None if deadline_mono_ns is None else max(0.0, (deadline_mono_ns - clock()) / NS)
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if main in done:
            main.result()
            grace = clock() + int(spec.target.deadline_s * NS)
            if deadline_mono_ns is not None:
                grace = min(grace, deadline_mono_ns)
            drained = await _drain_or_abort(r, grace, abort)
            if not drained:
                status = "aborted" if abort.is_set() else "timed_out"
            elif levels_done and levels_done[-1].drained_wall_ns is None:
                levels_done[-1].drained_wall_ns = r.wall(clock())
        else:
            status = "aborted" if stop_abort in done else "timed_out"
            r.stopping = True
            r.stop_reason = status
            main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await main
        await _cancel_all(r, status)
        stop_abort.cancel()
        for b in background:
            b.cancel()
        await asyncio.gather(*background, stop_abort, return_exceptions=True)
        r.tick()
        r.flush()
        valid, reasons, health = r.check.verdict(spec.validity)
        return ShardResult(
            plan.shard_id,
            status,
            r.next_index,
            dict(r.outcomes),
            valid,
            reasons,
            r.wall(start),
            r.wall(clock()),
            levels_done,
            health,
            r.search,
        )
    finally:
        r.close()


async def _drain_or_abort(r: Shard, until: int, abort: asyncio.Event) -> bool:
    drain = asyncio.create_task(drain_in_flight(r, until))
    ab = asyncio.create_task(abort.wait())
    await asyncio.wait({drain, ab}, return_when=asyncio.FIRST_COMPLETED)
    ab.cancel()
    if drain.done():
        return drain.result()
    drain.cancel()
    return False


async def _cancel_all(r: Shard, reason: str) -> None:
    r.stopping = True
    r.stop_reason = "run_ended" if reason == "completed" else reason
    tasks = list(r.in_flight)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
