"""Why the generator was late, when it was: per second, how long the event loop's thread waited
for a CPU while ready to run (the kernel's run-queue delay, /proc/self/task/TID/schedstat), how
long it ran, how much CPU this process's other threads took (they hold the GIL while they run
Python), and how long garbage collection paused everything (gc.callbacks). The self-check
(loadgen/engine/health.py) sums them over the seconds it found late and names the largest.
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass
from typing import Any

# a cause is named only when it stands for at least this share of the late seconds' lateness
# budget: below it the lateness came from somewhere none of these meters sees
_MIN_MS_PER_LATE_S = 2.0


class _GcPauses:
    """Total ns every collection of this process took, from gc.callbacks (installed once)."""

    def __init__(self) -> None:
        self.total_ns = 0
        self._started = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.total_ns += time.perf_counter_ns() - self._started
            self._started = 0


_GC = _GcPauses()
_GC_LOCK = threading.Lock()


def _gc_pauses() -> _GcPauses:
    with _GC_LOCK:
        if _GC not in gc.callbacks:
            gc.callbacks.append(_GC)
    return _GC


def _schedstat(tid: int) -> tuple[int, int]:
    """(ns on a CPU, ns waiting on a run queue) of thread `tid`; zeros without /proc."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as fh:
            on, wait = fh.read().split()[:2]
        return int(on), int(wait)
    except (OSError, ValueError):
        return 0, 0


@dataclass(frozen=True, slots=True)
class Causes:
    """One second's meters, in ms: the loop thread's run-queue wait and CPU, the other threads'
    CPU, garbage collection pauses."""

    runq_wait_ms: float = 0.0
    loop_cpu_ms: float = 0.0
    threads_cpu_ms: float = 0.0
    gc_ms: float = 0.0


class CauseMeter:
    """Takes `Causes` per second; made and read on the event loop's thread (the thread CPU and
    run-queue wait are that thread's; the other threads' CPU is the process's less it, so a
    thread that ended meanwhile still counts)."""

    def __init__(self) -> None:
        self._tid = threading.get_native_id()
        self._gc = _gc_pauses()
        self._last = self._read()

    def _read(self) -> tuple[int, int, int, int]:
        wait = _schedstat(self._tid)[1]
        return wait, time.thread_time_ns(), time.process_time_ns(), self._gc.total_ns

    def take(self) -> Causes:
        now = self._read()
        (wait0, loop0, proc0, gc0), self._last = self._last, now
        loop_ns = now[1] - loop0
        return Causes(
            runq_wait_ms=(now[0] - wait0) / 1e6,
            loop_cpu_ms=loop_ns / 1e6,
            threads_cpu_ms=max(0, now[2] - proc0 - loop_ns) / 1e6,
            gc_ms=(now[3] - gc0) / 1e6,
        )


CAUSE_TEXT = {
    "runq_wait_ms": (
        "CPU starvation: the event loop's thread was ready but waited {ms:,.0f} ms for a CPU "
        "(other processes on this host)"
    ),
    "threads_cpu_ms": (
        "other threads of this process ran {ms:,.0f} ms (holding the GIL the loop needs)"
    ),
    "gc_ms": "garbage collection paused the loop for {ms:,.0f} ms",
    "loop_cpu_ms": "the event loop itself was busy ({ms:,.0f} ms of CPU)",
}


def late_totals(late: list[Causes]) -> dict[str, float]:
    """Each meter summed over the late seconds (ms)."""
    return {k: sum(getattr(c, k) for c in late) for k in CAUSE_TEXT}


def name_cause(late: list[Causes], late_s: float) -> str:
    """One sentence naming what held the generator back in its late seconds: the largest meter
    when it is at least _MIN_MS_PER_LATE_S per late second, else that none of them explains it.
    The loop's own CPU counts only past half of those seconds (a loop is meant to run)."""
    totals = late_totals(late)
    budget = max(late_s, 1e-9)
    scored = dict(totals)
    scored["loop_cpu_ms"] = max(0.0, totals["loop_cpu_ms"] - 500.0 * late_s)
    key = max(scored, key=lambda k: scored[k])
    where = f"in the {late_s:.1f} s it was late"
    if scored[key] / budget < _MIN_MS_PER_LATE_S:
        return (
            f"cause: late for another reason {where}: not CPU starvation "
            f"({totals['runq_wait_ms']:,.0f} ms waiting for a CPU), garbage collection "
            f"({totals['gc_ms']:,.0f} ms), other threads ({totals['threads_cpu_ms']:,.0f} ms) "
            "or a busy loop"
        )
    return f"cause {where}: " + CAUSE_TEXT[key].format(ms=totals[key])
