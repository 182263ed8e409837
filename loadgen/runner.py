"""The runner: executes one shard plan. Sends every request at its absolute scheduled time,
stamps each event on the monotonic clock, turns each scheduled request into exactly one
terminal record, ticks once a second, and judges its own health.

Only this module (and the targets it drives, through the injected clock) reads the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.health import SelfCheck, rss_bytes
from loadgen.plan import ShardPlan, Sink
from loadgen.records import (
    Batch,
    Outcome,
    Phase,
    RequestRecord,
    Tick,
    TokenSource,
    make_request_id,
)
from loadgen.schedule import (
    Level,
    load_trace,
    open_loop_offsets,
    saturation_levels,
    static_levels,
    trace_share,
)
from loadgen.spec import RunSpec
from loadgen.target import Clock, EventKind, PreparedRequest, Target
from loadgen.targets.failures import classify
from loadgen.workload import Prompt, Workload, request_body

FLUSH_RECORDS = 1024  # hand records to the sink at least this often (and once a second)
# Closed-loop users of a level start this far apart rather than all in one instant: a burst of
# N simultaneous sends is the generator's serialisation, not the server's latency.
SPAWN_INTERVAL_NS = 1_000_000
_NS = 1_000_000_000


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


@dataclass(slots=True)
class _LevelWindow:
    level: Level
    start: int  # monotonic ns
    end: int
    samples: dict[str, list[float]] | None = None  # per-metric ms values (saturation only)


class _Stop(Exception):
    """The run is over for this shard (abort, deadline or request budget)."""


class ShardRunner:
    """State of one shard's execution. Use `run_shard()`; this class keeps the counters."""

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
        # per-second counters
        self.started = self.completed = self.errors = self.tokens = 0
        self.chunks_seen = 0  # chunk arrivals stamped so far (weights the lag probe)
        self.check = SelfCheck(clock, activity=lambda: self.chunks_seen)
        self.stopping = False
        self.stop_reason = ""

    # ------------------------------------------------------------------ helpers

    def wall(self, mono_ns: int) -> int:
        return self.anchor_wall + (mono_ns - self.anchor_mono)

    def take_index(self) -> int | None:
        if self.stopping or self.next_index >= self.plan.max_requests:
            return None
        i = self.next_index
        self.next_index += 1
        return i

    async def sleep_until(self, mono_ns: int) -> None:
        delay = mono_ns - self.clock()
        if delay > 0:
            await asyncio.sleep(delay / _NS)

    def new_record(self, index: int, window: _LevelWindow, sched: int, **kw: Any) -> RequestRecord:
        lvl = window.level
        offset_s = (sched - window.start) / _NS
        if offset_s < lvl.warmup_s:
            phase = Phase.WARMUP
        elif offset_s >= lvl.duration_s - lvl.cooldown_s:
            phase = Phase.COOLDOWN
        else:
            phase = Phase.STEADY
        p = self.plan
        return RequestRecord(
            request_id=make_request_id(p.run_id, p.shard_id, index),
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

    async def wait_to_send(self, index: int, window: _LevelWindow, sched: int) -> bool:
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

    def not_sent(self, index: int, window: _LevelWindow, sched: int, reason: str) -> None:
        rec = self.new_record(index, window, sched, outcome=Outcome.NOT_SENT, error_phase=reason)
        self.emit(rec)

    # ------------------------------------------------------------------ one request

    async def execute(
        self,
        index: int,
        window: _LevelWindow,
        sched: int,
        prompt: Prompt,
        session: tuple[int, int] | None = None,
        context: list[dict[str, str]] | None = None,
    ) -> str:
        """Send one request scheduled at `sched` (monotonic ns); emit its record. Returns the
        answer text (only needed by multi-turn sessions)."""
        clock = self.clock
        check = self.check
        start = clock()
        delay_ms = (start - sched) / 1e6
        check.dispatch_second.append(delay_ms)
        messages = context if context is not None else prompt.messages
        body = request_body(self.spec, Prompt(messages, prompt.prompt_tokens, prompt.max_tokens))
        rid = make_request_id(self.plan.run_id, self.plan.shard_id, index)
        t = self.spec.target
        prepared = PreparedRequest(
            rid,
            body,
            prompt.prompt_tokens if prompt.prompt_tokens >= 0 else None,
            prompt.max_tokens,
            t.deadline_s,
            t.idle_timeout_s,
        )
        rec = self.new_record(
            index,
            window,
            sched,
            prompt_tokens=prepared.prompt_tokens,
            max_tokens=prompt.max_tokens,
            session_id=session[0] if session else None,
            turn=session[1] if session else None,
        )
        self.started += 1
        keep_text = self.spec.store_content or session is not None
        texts: list[str] = []
        chars: list[int] = []
        offsets = rec.chunk_offsets_us
        ctokens = rec.chunk_tokens
        sent = last_t = -1
        done = False
        usage = None
        try:
            async for ev in self.target.stream(prepared, clock):
                k = ev.kind
                if k is EventKind.CONTENT or k is EventKind.REASONING or k is EventKind.TOOL_CALL:
                    if rec.first_token_ns is None:
                        rec.first_token_ns = ev.t_ns - sched
                    if k is not EventKind.REASONING and rec.first_answer_ns is None:
                        rec.first_answer_ns = ev.t_ns - sched
                    if k is EventKind.REASONING:
                        rec.reasoning_tokens += ev.tokens
                    spread = ev.spread_ns
                    if spread == 0:
                        check.exact_stamped += 1
                    elif spread < 0:
                        check.user_stamped += 1
                    else:
                        check.merged_stamped += 1
                    if ev.t_ns == last_t:  # same read: one arrival, one chunk
                        ctokens[-1] += ev.tokens
                        chars[-1] += len(ev.text)
                    else:
                        self.chunks_seen += 1
                        offsets.append((ev.t_ns - sent) // 1000)
                        ctokens.append(ev.tokens)
                        chars.append(len(ev.text))
                        last_t = ev.t_ns
                    if keep_text and k is not EventKind.REASONING:
                        texts.append(ev.text)
                elif k is EventKind.SENT:
                    sent = ev.t_ns
                    rec.sent_ns = sent - sched
                    if ev.connect_ns >= 0:
                        rec.connect_ns = ev.connect_ns
                elif k is EventKind.RESENT:
                    rec.resent += 1
                elif k is EventKind.HEADERS:
                    rec.headers_ns = ev.t_ns - sched
                    rec.http_status = ev.status
                elif k is EventKind.USAGE:
                    usage = ev.usage
                elif k is EventKind.DONE:
                    rec.end_ns = ev.t_ns - sched
                    done = True
            if not done:
                rec.outcome = Outcome.STREAM_ERROR
                rec.error_detail = "stream ended without a terminal event"
        except asyncio.CancelledError:
            rec.outcome = Outcome.CANCELLED
            rec.error_phase = self.stop_reason or "cancelled"
            raise
        except Exception as exc:
            outcome, phase, status, detail = classify(exc)
            rec.outcome, rec.error_phase, rec.error_detail = outcome, phase, detail
            if status is not None:
                rec.http_status = status
            ra = getattr(exc, "retry_after_s", None)
            if isinstance(ra, (int, float)):
                rec.retry_after_s = float(ra)
        finally:
            if rec.end_ns is None:
                rec.end_ns = clock() - sched
            self._finish_tokens(rec, usage, chars)
            if self.spec.store_content:
                rec.prompt_text = _messages_text(messages)
                rec.response_text = "".join(texts)
            self.completed += 1
            self.tokens += rec.output_tokens
            if rec.outcome is not Outcome.OK:
                self.errors += 1
            if window.samples is not None:
                _sample_metrics(window.samples, rec)
            self.emit(rec)
        return "".join(texts)

    @staticmethod
    def _finish_tokens(rec: RequestRecord, usage: Any, chars: list[int]) -> None:
        """Reconcile client counts with the server's usage (when given) and attribute tokens to
        chunks: if usage disagrees with one-token-per-delta, spread usage over chunks by text
        length (largest remainder), so per-token ITL uses the server's count."""
        client = sum(rec.chunk_tokens)
        rec.client_tokens = client
        rec.output_tokens = client
        if usage is None:
            return
        rec.usage_prompt_tokens = usage.prompt_tokens
        rec.usage_completion_tokens = usage.completion_tokens
        if usage.server is not None:
            st = usage.server
            rec.server_prompt_tokens, rec.server_prefill_ms = st.prompt_tokens, st.prefill_ms
            rec.server_decode_tokens, rec.server_decode_ms = st.decode_tokens, st.decode_ms
            rec.server_cached_tokens, rec.server_queue_ms = st.cached_tokens, st.queue_ms
        if usage.reasoning_tokens is not None:
            rec.reasoning_tokens = usage.reasoning_tokens
        if usage.completion_tokens is None:
            return
        rec.output_tokens = usage.completion_tokens
        rec.token_source = TokenSource.USAGE
        n = len(rec.chunk_tokens)
        if n and usage.completion_tokens != client and usage.completion_tokens >= n:
            weights = np.asarray(chars, dtype=np.float64) + 1e-9
            share = weights / weights.sum() * usage.completion_tokens
            base = np.maximum(np.floor(share).astype(np.int64), 1)
            rest = usage.completion_tokens - int(base.sum())
            if rest > 0:
                order = np.argsort(-(share - np.floor(share)))
                base[order[:rest]] += 1
            elif rest < 0:  # the floor-at-1 overshot; take back from the largest
                for j in np.argsort(-base)[:-rest]:
                    base[j] -= 1
            rec.chunk_tokens[:] = base.tolist()

    # ------------------------------------------------------------------ load models

    async def closed_loop_user(self, window: _LevelWindow, user: int) -> None:
        """One virtual user: send, wait for the answer, think, repeat until the level ends.
        The next prompt is built before its send time, so building it never delays the send."""
        think = int(self.spec.load.think_time_s * _NS)
        ready = window.start + user * SPAWN_INTERVAL_NS
        sessions = self.spec.workload.sessions
        while not self.stopping and ready < window.end:
            if sessions is not None:
                await self.sleep_until(ready)
                ready = await self.run_session(window, ready, think)
                if ready < 0:
                    return
                continue
            index = self.take_index()
            if index is None:
                return
            prompt = self.workload.prompt(index)
            if not await self.wait_to_send(index, window, ready):
                return
            await self.execute(index, window, ready, prompt)
            ready = max(ready, self.clock() + think)

    async def run_session(self, window: _LevelWindow, ready: int, think: int) -> int:
        """One multi-turn session: each turn's context is the conversation so far. Returns when
        the next session may start (monotonic ns), or -1 when the shard's budget is spent."""
        sess = self.spec.workload.sessions
        assert sess is not None
        first = self.take_index()
        if first is None:
            return -1
        base = self.workload.prompt(first)
        context = list(base.messages)
        index = first
        for turn in range(sess.turns):
            if turn:
                await self.sleep_until(ready)
                if self.stopping or ready >= window.end:
                    break
                nxt = self.take_index()
                if nxt is None:
                    return -1
                index = nxt
                context = [
                    *context,
                    {"role": "user", "content": self.workload.user_turn(first, turn)},
                ]
            answer = await self.execute(index, window, ready, base, (first, turn), context)
            context = [*context, {"role": "assistant", "content": answer}]
            ready = max(ready, self.clock() + think)
        return ready

    async def open_loop(
        self, window: _LevelWindow, offsets: Any, forced: list[Any] | None = None
    ) -> None:
        """Dispatch requests at `window.start + offset`; `forced` gives per-request lengths.
        Each prompt is built before its send time; a send the cap forbids is `not_sent`."""
        cap = self.spec.load.max_concurrency
        think = int(self.spec.load.think_time_s * _NS)
        sessions = self.spec.workload.sessions is not None
        for j, off in enumerate(offsets):
            sched = window.start + int(off * _NS)
            if sched >= window.end or self.stopping:
                return
            coro: Any
            if sessions:
                if self.next_index >= self.plan.max_requests:
                    return
                await self.sleep_until(sched)
                if self.stopping:
                    return
                coro = self.run_session(window, sched, think)  # takes its own indices
            else:
                index = self.take_index()
                if index is None:
                    return
                pt, ot = (
                    (forced[j].prompt_tokens, forced[j].output_tokens) if forced else (None, None)
                )
                prompt = self.workload.prompt(index, pt, ot)
                if not await self.wait_to_send(index, window, sched):
                    return
                if len(self.in_flight) >= cap:
                    self.not_sent(index, window, sched, "concurrency_cap")
                    continue
                coro = self.execute(index, window, sched, prompt)
            task = asyncio.create_task(coro)
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def run_level(self, level: Level, start: int) -> _LevelWindow:
        window = _LevelWindow(level, start, start + int(level.duration_s * _NS))
        if self.spec.load.saturation is not None:
            window.samples = {
                "ttft_ms": [],
                "tpot_ms": [],
                "itl_ms": [],
                "e2e_ms": [],
                "ttfat_ms": [],
            }
        self.level_index = level.index
        p, load = self.plan, self.spec.load
        seed = int(np.random.default_rng([p.seed, level.index]).integers(0, 2**62))
        if level.kind == "concurrency":
            users = p.users_per_level[level.index] if level.index < len(p.users_per_level) else 0
            tasks = [asyncio.create_task(self.closed_loop_user(window, u)) for u in range(users)]
            for tk in tasks:
                self.in_flight.add(tk)
                tk.add_done_callback(self.in_flight.discard)
            await self.sleep_until(window.end)
            return window
        if level.kind == "trace":
            assert load.trace is not None
            entries = load_trace(load.trace)
            lo = float(p.extra.get("fraction_lo", 0.0))
            mine = [entries[i] for i in trace_share(len(entries), load.seed, lo, lo + p.fraction)]
            await self.open_loop(window, (e.t_s for e in mine), mine)
        else:
            r0 = level.value * p.fraction
            r1 = (level.ramp_to if level.ramp_to is not None else level.value) * p.fraction
            if r0 > 0 or r1 > 0:
                offs = open_loop_offsets(
                    load.arrival, load.burstiness, r0, r1, level.duration_s, seed, p.max_requests
                )
                await self.open_loop(window, offs)
        await self.sleep_until(window.end)
        return window

    # ------------------------------------------------------------------ ticks

    async def ticker(self, start: int) -> None:
        k = 1
        while True:
            await self.sleep_until(start + k * _NS)
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


def _messages_text(messages: list[dict[str, str]]) -> str:
    return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)


def _sample_metrics(samples: dict[str, list[float]], rec: RequestRecord) -> None:
    """Per-request values the saturation search judges a level by (failures count as misses)."""
    if rec.outcome is not Outcome.OK or rec.phase is not Phase.STEADY:
        if rec.phase is Phase.STEADY:
            for v in samples.values():
                v.append(float("inf"))
        return
    sent = rec.sent_ns or 0
    ft = rec.first_token_ns
    end = rec.end_ns or 0
    if ft is None:
        return
    samples["ttft_ms"].append((ft - sent) / 1e6)
    samples["e2e_ms"].append((end - sent) / 1e6)
    if rec.first_answer_ns is not None:
        samples["ttfat_ms"].append((rec.first_answer_ns - sent) / 1e6)
    if rec.output_tokens > 1:
        samples["tpot_ms"].append((end - ft) / (rec.output_tokens - 1) / 1e6)
    offs, toks = rec.chunk_offsets_us, rec.chunk_tokens
    for i in range(1, len(offs)):
        gap = (offs[i] - offs[i - 1]) / 1e3 / max(toks[i], 1)
        samples["itl_ms"].extend([gap] * max(toks[i], 1))


def _meets_slos(spec: RunSpec, samples: dict[str, list[float]]) -> bool:
    for slo in spec.slos:
        vals = samples.get(slo.metric) or []
        if not vals or float(np.percentile(vals, slo.percentile)) > slo.threshold:
            return False
    return True


async def run_shard(
    plan: ShardPlan,
    target: Target,
    sink: Sink,
    *,
    start_at_mono_ns: int | None = None,
    abort: asyncio.Event | None = None,
    on_tick: Callable[[Tick], None] | None = None,
    deadline_mono_ns: int | None = None,
    clock: Clock = time.perf_counter_ns,
    wall_clock: Callable[[], int] = time.time_ns,
    tokens_per_word: float = 1.0,
) -> ShardResult:
    """Run one shard to the end. Never raises for failed requests: each is a record.

    `start_at_mono_ns` (monotonic ns) is when the first level begins; `deadline_mono_ns` a hard
    end (soft time limit) after which in-flight requests are cancelled and the shard is
    `timed_out`; setting `abort` cancels in-flight requests and ends it as `aborted`.
    """
    abort = abort or asyncio.Event()
    r = ShardRunner(
        plan,
        target,
        sink,
        clock=clock,
        abort=abort,
        on_tick=on_tick,
        tokens_per_word=tokens_per_word,
        wall_clock=wall_clock,
    )
    spec = r.spec
    start = start_at_mono_ns if start_at_mono_ns is not None else clock()
    status = "completed"
    levels_done: list[LevelResult] = []
    background = [asyncio.create_task(r.check.lag.run())]
    await r.sleep_until(start)
    background.append(asyncio.create_task(r.ticker(start)))

    async def body() -> None:
        t0 = start
        if spec.load.saturation is None:
            for lvl in static_levels(spec.load):
                w = await r.run_level(lvl, t0)
                levels_done.append(_level_result(r, w))
                t0 = w.end
            return
        sat = spec.load.saturation
        history: list[tuple[float, bool]] = []
        i = 0
        while (
            value := saturation_levels(sat.start, sat.max, history, sat.max_steps, sat.tolerance)
        ) is not None:
            lvl = Level(
                i, "rate", value, spec.load.duration_s, spec.load.warmup_s, spec.load.cooldown_s
            )
            w = await r.run_level(lvl, t0)
            await _drain(r, w.end + int(spec.target.deadline_s * _NS))
            assert w.samples is not None
            met = _meets_slos(spec, w.samples)
            history.append((value, met))
            res = _level_result(r, w)
            res.met_slos = met
            levels_done.append(res)
            t0 = max(w.end, clock())
            i += 1

    main = asyncio.create_task(body())
    stop_abort = asyncio.create_task(abort.wait())
    waiters: set[asyncio.Future[Any]] = {main, stop_abort}
    timeout = None if deadline_mono_ns is None else max(0.0, (deadline_mono_ns - clock()) / _NS)
    done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if main in done:
        main.result()
        grace = clock() + int(spec.target.deadline_s * _NS)
        if deadline_mono_ns is not None:
            grace = min(grace, deadline_mono_ns)
        drained = await _drain_or_abort(r, grace, abort)
        if not drained:
            status = "aborted" if abort.is_set() else "timed_out"
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
    )


def _level_result(r: ShardRunner, w: _LevelWindow) -> LevelResult:
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


async def _drain(r: ShardRunner, until: int) -> bool:
    """Wait for in-flight requests to finish by `until` (monotonic ns); True if they did."""
    while r.in_flight:
        left = (until - r.clock()) / _NS
        if left <= 0:
            return False
        await asyncio.wait(set(r.in_flight), timeout=left)
    return True


async def _drain_or_abort(r: ShardRunner, until: int, abort: asyncio.Event) -> bool:
    drain = asyncio.create_task(_drain(r, until))
    ab = asyncio.create_task(abort.wait())
    await asyncio.wait({drain, ab}, return_when=asyncio.FIRST_COMPLETED)
    ab.cancel()
    if drain.done():
        return drain.result()
    drain.cancel()
    return False


async def _cancel_all(r: ShardRunner, reason: str) -> None:
    r.stopping = True
    r.stop_reason = "run_ended" if reason == "completed" else reason
    tasks = list(r.in_flight)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
