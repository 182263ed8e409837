"""The generator watching itself: event-loop lag, dispatch delay and CPU, summarised per second
for ticks and over the whole shard for the validity verdict.

Distributions are kept in fixed log-spaced histograms (bounded memory however long the run);
they only decide validity and are never reported as latencies of the server.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import numpy as np

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Bin edges in ms: 1 µs .. 100 s, 40 bins per decade (~6% wide).
_EDGES_MS = np.logspace(-3, 5, 8 * 40 + 1)


class Histogram:
    """Counts of values (ms) in log-spaced bins; quantiles answer with a bin's upper edge."""

    __slots__ = ("counts", "max")

    def __init__(self) -> None:
        self.counts = np.zeros(len(_EDGES_MS) + 1, dtype=np.int64)
        self.max = 0.0

    def add_many(self, values_ms: list[float]) -> None:
        if not values_ms:
            return
        arr = np.asarray(values_ms, dtype=np.float64)
        idx = np.searchsorted(_EDGES_MS, arr, side="left")
        np.add.at(self.counts, idx, 1)
        self.max = max(self.max, float(arr.max()))

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


def rss_bytes() -> int:
    """Resident set size of this process (bytes), from /proc when available."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except OSError:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class LoopLagProbe:
    """Wakes every `interval_s` and records how late it woke (ms): the time any I/O callback
    of this loop could have waited before running, i.e. the stamping error bound."""

    def __init__(self, clock: Callable[[], int], interval_s: float = 0.005) -> None:
        self._clock = clock
        self._interval_ns = int(interval_s * 1e9)
        self.second: list[float] = []  # samples since the last tick
        self.total = Histogram()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        clock = self._clock
        interval = self._interval_ns
        due = clock() + interval
        while True:
            await asyncio.sleep(max(0, due - clock()) / 1e9)
            woke = clock()
            # Time through the ready queue: what an I/O callback queued now would wait.
            queued = loop.create_future()
            loop.call_soon(queued.set_result, None)
            await queued
            ran = clock()
            # Timers are quantised to whole ms by the selector: lateness beyond that counts too.
            late_timer_ms = max(0.0, (woke - due) / 1e6 - 1.0)
            self.second.append((ran - woke) / 1e6 + late_timer_ms)
            due = max(due + interval, ran + interval // 2)

    def take_second(self) -> tuple[float, float]:
        """(max, p99) of the last second's samples in ms, folded into the shard histogram."""
        samples, self.second = self.second, []
        if not samples:
            return 0.0, 0.0
        self.total.add_many(samples)
        arr = np.asarray(samples)
        return float(arr.max()), float(np.percentile(arr, 99))


class CpuMeter:
    """This process's CPU use between calls, in percent of one core."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    def take(self) -> float:
        cpu, wall = time.process_time(), time.perf_counter()
        d_wall = wall - self._wall
        pct = 100.0 * (cpu - self._cpu) / d_wall if d_wall > 0 else 0.0
        self._cpu, self._wall = cpu, wall
        return pct
