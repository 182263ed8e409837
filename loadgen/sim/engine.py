"""When tokens are due: one timer heap on the event loop (absolute monotonic ns, never accumulated
sleeps, server-wide stall windows), and the two engine models that feed it — fixed TTFT/ITL, and
continuous batching with slots, prefill, per-batch step time and a KV budget.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from loadgen.sim.config import SimConfig
from loadgen.sim.histograms import Histogram

Action = Callable[[int], None]
"""Called with the due time (monotonic ns) it was scheduled for."""

_NEVER = 1 << 62
_SLEEP_MIN_NS = 150_000  # below this, spinning is cheaper than a sleep's wake-up slack
_SLEEP_SLACK_NS = 80_000  # nanosleep overshoot (50 µs default timer slack plus wake-up)


class Scheduler:
    """Runs actions at absolute `time.perf_counter_ns()` times. The loop timer is armed
    `spin_ns` early, because loop timers have millisecond granularity; in that last stretch the
    loop sleeps (blocking, releasing the CPU) until ~0.1 ms before the due time and spins the
    rest with `call_soon`. Inside a stall window nothing runs; due actions run when it ends.
    Stall k (k >= 1) covers [t0 + k*every, t0 + k*every + for) with t0 the scheduler's creation.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, cfg: SimConfig) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, Action]] = []
        self._seq = itertools.count()
        self._handle: asyncio.Handle | None = None
        self._armed_due = _NEVER
        self._running = False
        self._spin_ns = int(cfg.timer_spin_us * 1000)
        self._stall_every = int(cfg.stall_every_s * 1e9)
        self._stall_for = int(cfg.stall_for_s * 1e9)
        self.t0 = time.perf_counter_ns()

    def __len__(self) -> int:
        return len(self._heap)

    def stalled(self, t_ns: int) -> bool:
        if not self._stall_every:
            return False
        since = t_ns - self.t0
        return since >= self._stall_every and since % self._stall_every < self._stall_for

    def stall_end(self, t_ns: int) -> int:
        since = t_ns - self.t0
        return t_ns - since % self._stall_every + self._stall_for

    def at(self, due_ns: int, action: Action) -> None:
        heapq.heappush(self._heap, (due_ns, next(self._seq), action))
        if due_ns < self._armed_due and not self._running:
            self._arm(due_ns)

    def now_or_stalled(self, action: Action) -> None:
        """Run `action` now, or when the current stall ends."""
        now = time.perf_counter_ns()
        if self.stalled(now):
            self.at(now, action)
        else:
            action(now)

    def _arm(self, due_ns: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        now = time.perf_counter_ns()
        if self._stall_every and self.stalled(max(due_ns, now)):
            due_ns = self.stall_end(max(due_ns, now))  # sleep through a stall, never spin in it
        self._armed_due = due_ns
        delay_ns = due_ns - now - self._spin_ns
        if delay_ns > 0:
            self._handle = self._loop.call_later(delay_ns / 1e9, self._run)
        else:
            self._handle = self._loop.call_soon(self._run)

    def _run(self) -> None:
        self._handle = None
        self._armed_due = _NEVER
        heap = self._heap
        now = time.perf_counter_ns()
        if heap:
            # Inside the spin window with nothing due yet: sleep most of the remainder instead
            # of burning it (the host is shared), then spin only the last ~0.1 ms.
            remaining = heap[0][0] - now
            if _SLEEP_MIN_NS < remaining <= self._spin_ns:
                time.sleep((remaining - _SLEEP_SLACK_NS) / 1e9)
                now = time.perf_counter_ns()
        if not self.stalled(now):
            pop = heapq.heappop
            self._running = True  # actions schedule more; arm once, for the head, afterwards
            try:
                while heap and heap[0][0] <= now:
                    due, _, action = pop(heap)
                    action(due)
            finally:
                self._running = False
        if heap:
            self._arm(heap[0][0])

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._heap.clear()
        self._armed_due = _NEVER


class Sequence(Protocol):
    """A request being generated. `on_token(due_ns)` emits the next token and returns True when
    the sequence is finished (all tokens, a fault ended it, or the client left). The engine
    sets `admitted_ns` when the sequence gets a slot (its queue time ends there)."""

    prompt_tokens: int
    max_tokens: int
    admitted_ns: int

    def on_token(self, due_ns: int) -> bool: ...


class Engine(Protocol):
    running: int
    waiting: int
    kv_used: int
    queue_time: Histogram  # arrival -> admission into the batch
    ttft: Histogram  # arrival -> first token

    def submit(self, seq: Sequence, arrival_ns: int) -> None: ...

    def cancel(self, seq: Sequence) -> None: ...


class _FixedSeq:
    __slots__ = ("arrival_ns", "engine", "fire", "itl_ns", "seq")

    def __init__(self, seq: Sequence, engine: FixedEngine, arrival_ns: int) -> None:
        self.arrival_ns: int | None = arrival_ns
        self.seq = seq
        self.engine = engine
        self.fire: Action = self._fire
        # an answer with a pace of its own (loadgen.sim.audio: audio at a real-time factor)
        self.itl_ns: int = getattr(seq, "itl_ns", 0) or engine.itl_ns

    def _fire(self, due_ns: int) -> None:
        if self.arrival_ns is not None:
            self.engine.ttft.observe_ns(due_ns - self.arrival_ns)
            self.arrival_ns = None
        if self.seq.on_token(due_ns):
            self.engine.running -= 1
        else:
            self.engine.sched.at(due_ns + self.itl_ns, self.fire)


class FixedEngine:
    """Token i of every stream is due at arrival + ttft + i * itl, whatever the load."""

    waiting = 0
    kv_used = 0

    def __init__(self, cfg: SimConfig, sched: Scheduler) -> None:
        self.sched = sched
        self.ttft_ns = int(cfg.ttft_ms * 1e6)
        self.itl_ns = int(cfg.itl_ms * 1e6)
        self.running = 0  # sequences submitted and not yet finished (incl. cancelled ones)
        self.queue_time = Histogram()
        self.ttft = Histogram()

    def submit(self, seq: Sequence, arrival_ns: int) -> None:
        self.running += 1
        self.queue_time.observe_ns(0)  # admitted at once: no queue in this model
        seq.admitted_ns = arrival_ns
        self.sched.at(arrival_ns + self.ttft_ns, _FixedSeq(seq, self, arrival_ns).fire)

    def cancel(self, seq: Sequence) -> None:
        """Nothing to free now: a cancelled sequence's next `on_token` returns True."""


class BatchEngine:
    """Continuous batching. A step starts when the previous one ends (or at an arrival when
    idle); it admits waiting requests FIFO while a slot is free and their prompt + max_tokens fit
    the KV budget (head-of-line blocking, like vLLM), lasts base + per_seq * batch + admitted
    prompt tokens / prefill rate, and at its end every sequence in it gets one token.
    """

    def __init__(self, cfg: SimConfig, sched: Scheduler) -> None:
        self._sched = sched
        self._slots = cfg.slots
        self._capacity = cfg.kv_capacity_tokens
        self._base_ns = cfg.decode_step_ms * 1e6
        self._per_seq_ns = cfg.decode_step_ms_per_seq * 1e6
        self._prefill_ns_per_token = 1e9 / cfg.prefill_tokens_per_s
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._busy = False
        self.kv_used = 0
        self.steps = 0
        self.queue_time = Histogram()
        self.ttft = Histogram()
        # arrival (ns) of each sequence until its first token, by id (for the two histograms)
        self._arrival: dict[int, int] = {}

    @property
    def running(self) -> int:  # type: ignore[override]
        return len(self._running)

    @property
    def waiting(self) -> int:  # type: ignore[override]
        return len(self._waiting)

    @staticmethod
    def kv_need(seq: Sequence) -> int:
        return seq.prompt_tokens + seq.max_tokens

    def submit(self, seq: Sequence, arrival_ns: int) -> None:
        self._waiting.append(seq)
        self._arrival[id(seq)] = arrival_ns
        if not self._busy:
            self._start_step(arrival_ns)

    def cancel(self, seq: Sequence) -> None:
        self._arrival.pop(id(seq), None)
        if seq in self._running:
            self._running.remove(seq)
            self.kv_used -= self.kv_need(seq)
        elif seq in self._waiting:
            self._waiting.remove(seq)

    def _start_step(self, t_ns: int) -> None:
        waiting, running = self._waiting, self._running
        prefill = 0
        while waiting and len(running) < self._slots:
            need = self.kv_need(waiting[0])
            if self.kv_used + need > self._capacity:
                break
            seq = waiting.popleft()
            seq.admitted_ns = t_ns
            arrived = self._arrival.get(id(seq))
            if arrived is not None:
                self.queue_time.observe_ns(t_ns - arrived)
            self.kv_used += need
            prefill += seq.prompt_tokens
            running.append(seq)
        if not running:
            self._busy = False
            return
        self._busy = True
        self.steps += 1
        dur = self._base_ns + self._per_seq_ns * len(running) + prefill * self._prefill_ns_per_token
        self._sched.at(t_ns + int(dur), self._step_end)

    def _step_end(self, due_ns: int) -> None:
        still: list[Sequence] = []
        for seq in self._running:
            arrived = self._arrival.pop(id(seq), None)
            if arrived is not None:
                self.ttft.observe_ns(due_ns - arrived)
            if seq.on_token(due_ns):
                self.kv_used -= self.kv_need(seq)
            else:
                still.append(seq)
        self._running = still
        self._start_step(due_ns)


def make_engine(cfg: SimConfig, sched: Scheduler) -> FixedEngine | BatchEngine:
    return FixedEngine(cfg, sched) if cfg.mode == "fixed" else BatchEngine(cfg, sched)
