"""How late this event loop runs a callback that falls due, the error of every stamp it takes in
user space: the loop-lag probe (`LoopLagProbe`) and the fixed log-spaced histograms its samples
and the shard's dispatch delays are kept in (`Histogram`: bounded memory however long the run).
The self-check (loadgen.engine.health) judges them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
from collections.abc import Callable

import numpy as np

from loadgen.engine.timer import PeriodicTimerFd, reads_clock_monotonic

# Bin edges in ms: 1 µs .. 100 s, 40 bins per decade (~6% wide).
_EDGES_MS = np.logspace(-3, 5, 8 * 40 + 1)


class Histogram:
    """Counts of values (ms) in log-spaced bins; quantiles answer with a bin's upper edge."""

    __slots__ = ("counts", "max")

    def __init__(self) -> None:
        self.counts = np.zeros(len(_EDGES_MS) + 1, dtype=np.int64)
        self.max = 0.0

    def add_many(self, values_ms: list[float], weights: list[int] | None = None) -> None:
        """Count each value once, or `weights[i]` times."""
        if not values_ms:
            return
        arr = np.asarray(values_ms, dtype=np.float64)
        idx = np.searchsorted(_EDGES_MS, arr, side="left")
        np.add.at(self.counts, idx, 1 if weights is None else np.asarray(weights, dtype=np.int64))
        self.max = max(self.max, float(arr.max()))

    def share_above(self, x_ms: float) -> float:
        """The share of values above `x_ms` (at bin resolution: bins wholly above it), 0..1."""
        total = self.n
        if total == 0:
            return 0.0
        i = int(np.searchsorted(_EDGES_MS, x_ms, side="right"))
        return float(self.counts[i + 1 :].sum()) / total

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def quantile(self, q: float) -> float:
        """Upper bound (ms) of the q-quantile; 0.0 when empty."""
        total = self.n
        if total == 0:
            return 0.0
        rank = q * total
        i = int(np.searchsorted(np.cumsum(self.counts), rank, side="left"))
        if i >= len(_EDGES_MS):
            return self.max
        return min(float(_EDGES_MS[i]), self.max)


class LoopLagProbe:
    """Measures what a network read waits for before this loop's callback sees it (ms): an
    instant falls due every `interval_s`, and the loop's reader callback subtracts its due time
    from the time it runs. That is exactly a stamp's error (the loop busy with other callbacks,
    or this process not scheduled), without the whole-millisecond rounding of the loop's own
    timers.

    The instants come from a periodic timerfd the loop watches (Linux, a clock that reads
    CLOCK_MONOTONIC): one wake-up of the process per instant, and a callback that runs late
    learns from the kernel how many instants it missed, each a sample. Elsewhere a thread
    writes each due time into a socket pair; that costs a second wake-up per instant and a
    hand-over of the interpreter lock (about twice the CPU, and 0.1 ms more on every reading:
    bench/lag_probe_cost.py), and when the whole process was starved, the starved thread sends
    one sample for the instants it missed.

    With `busy` (the shard: a request in flight) the timerfd's instants fall due only while a
    read could come: the probe disarms at the first instant it finds the shard idle and `wake`
    arms it again, at a random phase within an interval, when a request goes out. An idle
    shard's instants cost its host a wake-up every interval and measure no stamp (64 shards of
    one request a second on 2 cores: 16.5 ms of CPU a second each, 1.37 cores between them,
    bench/RESULTS.md). The fallback thread ticks whatever `busy` says."""

    def __init__(
        self,
        clock: Callable[[], int],
        interval_s: float = 0.005,
        activity: Callable[[], int] | None = None,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self._clock = clock
        self._interval_ns = int(interval_s * 1e9)
        self._activity = activity
        self._busy = busy
        self._seen = 0
        self._periodic: PeriodicTimerFd | None = None  # while running on a timerfd
        self._due = 0  # the instant its next expiry stands for
        self.paused = False  # disarmed: the shard was idle at its last instant
        self.second: list[float] = []  # samples since the last tick
        self.weights: list[int] = []  # stamps taken around each sample (1 + chunks since the last)
        self.total = Histogram()
        self.work = Histogram()  # the samples of seconds in which the generator had work

    def _first_due(self, after_ns: int) -> int:
        # a phase of its own: the shards of a host all start at one instant, and probes due at
        # the same instants would wake together every interval and read each other as lag
        phase = 1 + int.from_bytes(os.urandom(4), "little") % self._interval_ns
        return self._clock() + after_ns + phase

    async def run(self) -> None:
        interval_ns = self._interval_ns
        self._due = self._first_due(interval_ns)
        periodic = (
            PeriodicTimerFd.open(self._due, interval_ns)
            if reads_clock_monotonic(self._clock)
            else None
        )
        if periodic is None:
            await self._run_on_a_thread(interval_ns)
            return
        loop = asyncio.get_running_loop()
        self._periodic = periodic

        def on_expiry() -> None:
            missed = periodic.expirations()
            if missed:
                now = self._clock()
                for i in range(missed):
                    self._sample(now, self._due + i * interval_ns)
                self._due += missed * interval_ns
            if self._busy is not None and not self._busy():
                periodic.disarm()
                self.paused = True

        loop.add_reader(periodic.fileno(), on_expiry)
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            self._periodic = None
            loop.remove_reader(periodic.fileno())
            periodic.close()

    def wake(self) -> None:
        """A request went out: instants fall due again if the probe had paused."""
        if self.paused and self._periodic is not None:
            self.paused = False
            self._due = self._first_due(0)
            self._periodic.arm(self._due, self._interval_ns)

    def _sample(self, now: int, due: int) -> None:
        self.second.append(max(0, now - due) / 1e6)
        self.weights.append(1 + self._new_activity())

    async def _run_on_a_thread(self, interval_ns: int) -> None:
        loop = asyncio.get_running_loop()
        clock = self._clock
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        stop = threading.Event()
        pending = bytearray()

        def on_readable() -> None:
            now = clock()
            try:
                pending.extend(rsock.recv(4096))
            except (BlockingIOError, InterruptedError):
                return
            whole = len(pending) - len(pending) % 8
            for (sent,) in struct.iter_unpack("<q", bytes(pending[:whole])):
                self._sample(now, sent)
            del pending[:whole]

        def ticker() -> None:
            # Each byte carries the time it was *due*, not when this thread got to send it: if
            # the whole process was starved of CPU (the thread with it), that counts as well.
            due = clock() + interval_ns
            while not stop.wait(max(0.0, (due - clock()) / 1e9)):
                try:
                    wsock.send(struct.pack("<q", due))
                except OSError:
                    return
                due += interval_ns
                now = clock()
                if due < now:  # starved for more than an interval: one sample said so, resync
                    due = now + interval_ns

        loop.add_reader(rsock.fileno(), on_readable)
        thread = threading.Thread(target=ticker, name="peakload-lag-probe", daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            stop.set()
            loop.remove_reader(rsock.fileno())
            thread.join(timeout=1.0)
            rsock.close()
            wsock.close()

    def _new_activity(self) -> int:
        if self._activity is None:
            return 0
        now = self._activity()
        new, self._seen = now - self._seen, now
        return new

    def take_second(self, work: bool = True) -> tuple[float, float]:
        """(max, p99) of the last second's samples in ms, folded into the shard histogram (and
        into `work` when the generator had work in that second).

        Samples are weighted by the chunks stamped around them (`activity`), so the p99 is that
        of the stamps' errors: arrivals bunch up exactly when the loop is busiest (a burst of
        completions starting new requests), and a time-uniform p99 would miss that."""
        samples, self.second = self.second, []
        weights, self.weights = self.weights, []
        if not samples:
            return 0.0, 0.0
        self.total.add_many(samples, weights)
        if work:
            self.work.add_many(samples, weights)
        arr = np.asarray(samples)
        order = np.argsort(arr)
        cum = np.cumsum(np.asarray(weights, dtype=np.float64)[order])
        p99 = float(arr[order][min(int(np.searchsorted(cum, 0.99 * cum[-1])), len(arr) - 1)])
        return float(arr.max()), p99
