"""One shard's execution state: its counters, the records it has emitted but not yet handed to
the sink, the per-second tick, and the helpers every load model uses to schedule a request (ids,
phases, `not_sent` records). Only this state and the fold (loadgen/engine/fold.py) read the clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.engine.health import SelfCheck, rss_bytes
from loadgen.engine.plan import ShardPlan, Sink
from loadgen.engine.samples import sample_metrics
from loadgen.engine.schedule import Level
from loadgen.engine.timer import ShardTimer, shard_timer
from loadgen.engine.workload import Workload
from loadgen.results.records import Batch, Outcome, Phase, RequestRecord, Tick, make_request_id
from loadgen.runspec.spec import RunSpec
from loadgen.target import Clock, Target

FLUSH_RECORDS = 1024  # hand records to the sink at least this often (and once a second)
NS = 1_000_000_000


@dataclass(slots=True)
class LevelWindow:
    level: Level
    start: int  # monotonic ns
    end: int
    samples: dict[str, list[float]] | None = None  # per-metric ms values (saturation only)


class Shard:
    """State of one shard's execution. Use `loadgen.engine.runner.run_shard()`; this class keeps the
    counters."""

    def __init__(
        self,
        plan: ShardPlan,
        target: Target,
        sink: Sink,
        *,
        clock: Clock,
        abort: asyncio.Event,
        on_tick: Callable[[Tick], None] | None,
        tokens_per_word: float,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.plan = plan
        self.spec: RunSpec = plan.run_spec()
        self.target = target
        self.sink = sink
        self.clock = clock
        self.abort = abort
        self.on_tick = on_tick
        self.workload = Workload(self.spec, plan.seed, tokens_per_word)
        self.anchor_mono = clock()
        self.anchor_wall = (
            wall_clock()
        )  # the only wall-clock read: a later step cannot move durations
        self.next_index = 0
        self.in_flight: set[asyncio.Task[None]] = set()
        self.pending: list[RequestRecord] = []
        self.pending_ticks: list[Tick] = []
        self.outcomes: dict[str, int] = {}
        self.level_index = 0
        self.window: LevelWindow | None = None  # the level running now
        self.search: dict[str, Any] | None = None  # the saturation search's answer so far
        # per-second counters
        self.started = self.completed = self.errors = self.tokens = 0
        self.chunks_seen = 0  # chunk arrivals stamped so far (weights the lag probe)
        self.check = SelfCheck(
            clock,
            activity=lambda: self.chunks_seen,
            bound_ms=self.spec.validity.max_loop_lag_p99_ms,
            busy=lambda: bool(self.in_flight),  # the lag probe measures while a read may come
        )
        self.stopping = False
        self.stop_reason = ""
        self.timer: ShardTimer | None = None  # made on the loop, at the first wait

    # ------------------------------------------------------------------ helpers

    def wall(self, mono_ns: int) -> int:
        return self.anchor_wall + (mono_ns - self.anchor_mono)

    def mono(self, wall_ns: int) -> int:
        """The monotonic instant of a wall-clock one (the inverse of `wall`)."""
        return self.anchor_mono + (wall_ns - self.anchor_wall)

    def track(self, task: asyncio.Task[None]) -> None:
        """Count a request's task (or a closed-loop user's) in flight until it ends; the lag
        probe measures while any is."""
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        self.check.lag.wake()

    def take_index(self) -> int | None:
        if self.stopping or self.next_index >= self.plan.max_requests:
            return None
        i = self.next_index
        self.next_index += 1
        return i

    async def sleep_until(self, mono_ns: int) -> None:
        """Wait for an instant on the shard's clock, to within the timer's resolution (a
        timerfd's where there is one: loadgen/engine/timer.py)."""
        if self.timer is None:
            self.timer = shard_timer(self.clock)
        await self.timer.sleep_until(mono_ns)

    def close(self) -> None:
        """Release the shard's timer (run_shard, once the shard has ended)."""
        if self.timer is not None:
            self.timer.close()
            self.timer = None

    def new_record(self, index: int, window: LevelWindow, sched: int, **kw: Any) -> RequestRecord:
        lvl = window.level
        offset_s = (sched - window.start) / NS
        if offset_s < lvl.warmup_s:
            phase = Phase.WARMUP
        elif offset_s >= lvl.duration_s - lvl.cooldown_s:
            phase = Phase.COOLDOWN
        else:
            phase = Phase.STEADY
        p = self.plan
        return RequestRecord(
            request_id=make_request_id(p.run_id, p.shard_id, index, int(kw.get("attempt", 0))),
            run_id=p.run_id,
            shard_id=p.shard_id,
            region=p.region,
            level=lvl.index,
            index=index,
            scheduled_at_ns=self.wall(sched),
            phase=phase,
            **kw,
        )

    def emit(self, rec: RequestRecord) -> None:
        self.outcomes[rec.outcome.value] = self.outcomes.get(rec.outcome.value, 0) + 1
        self.pending.append(rec)
        if len(self.pending) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        if self.pending or self.pending_ticks:
            batch = Batch(self.pending, self.pending_ticks)
            self.pending, self.pending_ticks = [], []
            self.sink.write(batch)

    async def wait_to_send(self, index: int, window: LevelWindow, sched: int) -> bool:
        """Sleep until `sched` for request `index` (already scheduled: it has an id). If the shard
        stops first, the request gets its `not_sent` record here; returns False then."""
        try:
            await self.sleep_until(sched)
        except asyncio.CancelledError:
            self.not_sent(index, window, sched, self.stop_reason or "cancelled")
            raise
        if self.stopping:
            self.not_sent(index, window, sched, self.stop_reason or "run_ended")
            return False
        return True

    def not_sent(self, index: int, window: LevelWindow, sched: int, reason: str) -> None:
        rec = self.new_record(index, window, sched, outcome=Outcome.NOT_SENT, error_phase=reason)
        if (
            window.samples is not None and rec.phase is Phase.STEADY
        ):  # demanded and not served: a miss
            sample_metrics(window.samples, rec, sent_in_window=False)
        self.emit(rec)

    async def ticker(self, start: int) -> None:
        k = 1
        while True:
            await self.sleep_until(start + k * NS)
            k += 1
            self.tick()

    def tick(self) -> None:
        lag_max, lag_p99, disp_max, cpu = self.check.take_second()
        p = self.plan
        t = Tick(
            run_id=p.run_id,
            shard_id=p.shard_id,
            region=p.region,
            level=self.level_index,
            t_ns=self.wall(self.clock()),
            in_flight=len(self.in_flight),
            started=self.started,
            completed=self.completed,
            errors=self.errors,
            output_tokens=self.tokens,
            loop_lag_ms_max=lag_max,
            loop_lag_ms_p99=lag_p99,
            dispatch_delay_ms_max=disp_max,
            cpu_percent=cpu,
            rss_bytes=rss_bytes(),
        )
        self.started = self.completed = self.errors = self.tokens = 0
        self.pending_ticks.append(t)
        if self.on_tick is not None:
            self.on_tick(t)
        self.flush()
