"""When the event loop last looked at its sockets: the instants its selector was entered and
returned, which bound how early the bytes of a kernel-stamped read can have arrived.

The kernel stamps a read with its *last* segment's arrival. When several token events come in one
read, an earlier one may have arrived before that stamp, and by how much is what the self-check
must judge (`StreamEvent.spread_ns`). The socket was drained at its previous read, so nothing in
this read came before then; the loop's own iterations often say much more:

- The loop reads a socket in the iteration after the selector reported it ready. The selector
  is level-triggered, so bytes waiting when it was called make it return at once, and bytes that
  came during its wait wake it. A read made after selector call k therefore holds nothing that
  had arrived before call k-1 collected its events (else call k-1 would have reported the socket
  and the read would have happened then): nothing earlier than call k-1's return.
- If call k itself *waited* (returned later than a GIL hand-over after it was entered), nothing
  was ready when it was entered, so this read's bytes came during the wait, and the first of them
  woke it: they arrived no earlier than its return, less the time the woken thread waited for a
  CPU. That wait is measured where the kernel keeps it (the thread's run-queue delay in
  /proc/thread-self/schedstat, read around a call that may wait: the loop was idle then, so
  the two reads cost nothing a busy loop pays). Without schedstat, `floors` gives the bound
  both if the wake-up was on time and in any case (the wait's start), and the self-check
  judges the difference by how late the loop-lag probe found the loop.

Bound on a loop using `time.perf_counter_ns` or `time.monotonic_ns` (both CLOCK_MONOTONIC on
Linux), which is how every shard runs; other clocks, and loops other than asyncio's selector loop
(uvloop, whose reads carry no kernel stamp anyway), get no watch and keep the drained bound.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

# How long a thread may wait for the interpreter lock after the selector's system call returned
# before the loop reads the clock: twice the measuring process's switch interval
# (loadgen/engine/runtime.py, 0.25 ms). A call that returned later than this after it was
# entered has waited for an event.
GIL_SLACK_NS = 500_000
MONOTONIC_CLOCKS: tuple[Callable[[], int], ...] = (time.perf_counter_ns, time.monotonic_ns)

_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch | None] = (
    weakref.WeakKeyDictionary()
)


class LoopWatch:
    """The selector calls of one asyncio loop: when each was entered and returned (ns), and for
    a call that waited, how long its thread then waited for a CPU (-1: not measured)."""

    __slots__ = ("_fd", "entered", "prev_entered", "prev_returned", "returned", "woken_late")

    def __init__(self, schedstat_fd: int = -1) -> None:
        self.entered = self.returned = 0  # the latest call (the one whose events run now)
        self.prev_entered = self.prev_returned = 0  # the call before it
        self.woken_late = -1
        self._fd = schedstat_fd  # the loop thread's /proc/thread-self/schedstat, or -1

    def wrap(self, select: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter_ns
        fd = self._fd

        def watched_select(timeout: float | None = None) -> Any:
            self.prev_entered, self.prev_returned = self.entered, self.returned
            # a call with nothing ready (timeout 0) cannot wait: only the others are measured
            waits = fd >= 0 and (timeout is None or timeout > 0)
            before = run_queue_ns(fd) if waits else -1
            self.entered = clock()
            try:
                return select(timeout)
            finally:
                self.returned = returned = clock()
                if waits and returned - self.entered > GIL_SLACK_NS:
                    self.woken_late = run_queue_ns(fd) - before if before >= 0 else -1
                else:
                    self.woken_late = -1

        return watched_select

    def floors(self, drained_ns: int) -> tuple[int, int]:
        """(earliest arrival if the loop was woken on time, earliest arrival at all) of the bytes
        a reader callback running now is given, never before `drained_ns`. Call it only from a
        callback of the iteration the latest selector call began."""
        if self.prev_returned == 0:  # no iteration seen before this one
            return drained_ns, drained_ns
        if self.returned - self.entered > GIL_SLACK_NS:  # the call waited: they woke it
            woken = max(drained_ns, self.returned - GIL_SLACK_NS)
            if self.woken_late >= 0:  # measured: how long the woken thread waited for a CPU
                measured = max(drained_ns, self.entered, woken - self.woken_late)
                return measured, measured
            return woken, max(drained_ns, self.entered)
        earliest = max(drained_ns, self.prev_entered, self.prev_returned - GIL_SLACK_NS)
        return earliest, earliest


def run_queue_ns(fd: int) -> int:
    """The thread's total wait on a run queue (ns) from its open schedstat file, -1 unreadable."""
    try:
        return int(os.pread(fd, 96, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def open_schedstat() -> int:
    """This thread's schedstat, open for the life of the process's loop (-1 where absent)."""
    try:
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
    except OSError:
        return -1
    if run_queue_ns(fd) < 0:
        os.close(fd)
        return -1
    return fd


def watch(loop: asyncio.AbstractEventLoop) -> LoopWatch | None:
    """The loop's watch, installed on first use; None where the loop has no selector to watch."""
    if loop in _watches:
        return _watches[loop]
    selector = getattr(loop, "_selector", None)
    found: LoopWatch | None = None
    if selector is not None and callable(getattr(selector, "select", None)):
        fd = open_schedstat()
        if fd >= 0:
            weakref.finalize(loop, os.close, fd)
        found = LoopWatch(fd)
        selector.select = found.wrap(selector.select)
    _watches[loop] = found
    return found
