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
- If call k itself *slept* (it could wait, and it returned later than a GIL hand-over after it
  was entered, less any time its thread then waited for a CPU), nothing was ready when it was
  entered, so this read's bytes came during the wait, and the first of them woke it: they
  arrived no earlier than its return, less that wait for a CPU. The wait is measured where the
  kernel keeps it (the thread's run-queue delay in /proc/thread-self/schedstat, read after each
  call that took long enough to have slept: a busy loop's calls return at once and pay
  nothing), so a call preempted while bytes were ready is not taken for one that slept.
- Where the kernel keeps no such statistics, `floors` gives the narrow bound if the wake-up
  was on time beside the one that holds in any case (the call before), and the self-check
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
# (loadgen/engine/runtime.py, 0.25 ms). A call that took longer than this, less its thread's
# wait for a CPU, has slept.
GIL_SLACK_NS = 500_000
MONOTONIC_CLOCKS: tuple[Callable[[], int], ...] = (time.perf_counter_ns, time.monotonic_ns)

_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch | None] = (
    weakref.WeakKeyDictionary()
)


class LoopWatch:
    """The selector calls of one asyncio loop: when each was entered and returned (ns), and for
    a call that waited, how long its thread then waited for a CPU (-1: not measured)."""

    __slots__ = (
        "_fd",
        "_run_queue",
        "could_wait",
        "entered",
        "prev_entered",
        "prev_returned",
        "returned",
        "woken_late",
    )

    def __init__(self, schedstat_fd: int = -1) -> None:
        self.entered = self.returned = 0  # the latest call (the one whose events run now)
        self.prev_entered = self.prev_returned = 0  # the call before it
        self.could_wait = False  # the latest call had a timeout (nothing else ready to run)
        self.woken_late = -1  # the latest call's thread's wait for a CPU, at most (-1: unknown)
        self._fd = schedstat_fd  # the loop thread's /proc/thread-self/schedstat, or -1
        self._run_queue = run_queue_ns(schedstat_fd) if schedstat_fd >= 0 else -1

    def wrap(self, select: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter_ns
        fd = self._fd

        def watched_select(timeout: float | None = None) -> Any:
            self.prev_entered, self.prev_returned = self.entered, self.returned
            # a call with callbacks ready (timeout 0) cannot wait
            self.could_wait = timeout is None or timeout > 0
            self.entered = entered = clock()
            try:
                return select(timeout)
            finally:
                self.returned = returned = clock()
                self.woken_late = -1
                if self._run_queue >= 0 and returned - entered > GIL_SLACK_NS:
                    # read only after a call that may have slept (a busy loop's calls return at
                    # once); the wait since the last reading covers this call's, and more only
                    # if the thread also waited for a CPU while running callbacks since: an
                    # over-count, which can only widen the floors
                    now = run_queue_ns(fd)
                    if now >= 0:
                        self.woken_late, self._run_queue = now - self._run_queue, now

        return watched_select

    def floors(self, drained_ns: int) -> tuple[int, int]:
        """(earliest arrival if the loop was woken on time, earliest arrival at all) of the bytes
        a reader callback running now is given, never before `drained_ns`. Call it only from a
        callback of the iteration the latest selector call began."""
        if self.prev_returned == 0:  # no iteration seen before this one
            return drained_ns, drained_ns
        # the call before collected its events no earlier than this: holds whatever happened
        sure = max(drained_ns, self.prev_entered, self.prev_returned - GIL_SLACK_NS)
        if not self.could_wait:
            return sure, sure
        took = self.returned - self.entered
        late = self.woken_late
        if late >= 0:  # measured: the call slept if it took longer than its wait for a CPU
            if took - late <= GIL_SLACK_NS:
                return sure, sure
            woken = max(sure, self.entered, self.returned - GIL_SLACK_NS - late)
            return woken, woken
        if took > GIL_SLACK_NS:  # unmeasured: it slept and they woke it, if it was on time
            return max(sure, self.returned - GIL_SLACK_NS), sure
        return sure, sure


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
