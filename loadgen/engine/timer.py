"""The timer a shard waits on for its scheduled instants, with nanosecond resolution.

asyncio's own timers wake up to a millisecond late: the loop's selector takes its timeout in
whole milliseconds (CPython's epoll rounds up), so `asyncio.sleep` to a due time lands anywhere
in the millisecond after it, about 1 ms late at the median (bench/timer_lateness.py), and that
millisecond was most of a shard's dispatch delay. `PreciseTimer` arms one Linux timerfd, on
CLOCK_MONOTONIC at an absolute time, for the earliest due time of its sleepers; the loop's
selector wakes when it fires, as it does for a socket, at the instant.

`shard_timer(clock)` gives it where it can keep its promise (Linux, a clock that reads
CLOCK_MONOTONIC: `time.perf_counter_ns`, the shard's clock in production) and `LoopSleep`,
`asyncio.sleep`, anywhere else (another OS, an injected test clock). Either never returns
before the due time on its clock.

`PeriodicTimerFd` is a timerfd that fires at a fixed interval, for the self-check's loop-lag
probe (loadgen.engine.health): the loop watches it like a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import os
import sys
import time
from collections.abc import Callable
from typing import Protocol

NS = 1_000_000_000
CLOCK_MONOTONIC = 1  # <time.h>, the same on every Linux architecture
TFD_TIMER_ABSTIME = 1  # <sys/timerfd.h>


class ShardTimer(Protocol):
    async def sleep_until(self, due_ns: int) -> None:
        """Return once the clock reads `due_ns` or later (at once if it already does)."""

    def close(self) -> None:
        """Release what the timer holds; sleepers still waiting are cancelled."""


class LoopSleep:
    """`asyncio.sleep` on the given clock: up to a millisecond late (the loop's resolution)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock

    async def sleep_until(self, due_ns: int) -> None:
        delay = due_ns - self._clock()
        if delay > 0:
            await asyncio.sleep(delay / NS)

    def close(self) -> None:
        pass


class _TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", _TimeSpec), ("it_value", _TimeSpec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_create.restype = ctypes.c_int
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_ITimerSpec),
            ctypes.POINTER(_ITimerSpec),
        ]
        libc.timerfd_settime.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def reads_clock_monotonic(clock: Callable[[], int]) -> bool:
    """True when `clock` reads CLOCK_MONOTONIC, the clock a timerfd here is armed on."""
    if clock is time.perf_counter_ns:
        info = time.get_clock_info("perf_counter")
    elif clock is time.monotonic_ns:
        info = time.get_clock_info("monotonic")
    else:
        return False
    return "CLOCK_MONOTONIC" in info.implementation


def _settime(libc: ctypes.CDLL, fd: int, first_ns: int, interval_ns: int = 0) -> bool:
    """Arm timerfd `fd` to expire at `first_ns` (absolute, CLOCK_MONOTONIC), then every
    `interval_ns` (0: once); a `first_ns` of 0 disarms it. False when the kernel refused (errno
    kept for ctypes.get_errno)."""
    every, first = _TimeSpec(*divmod(interval_ns, NS)), _TimeSpec(*divmod(first_ns, NS))
    spec = _ITimerSpec(every, first)
    code: int = libc.timerfd_settime(fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None)
    return code == 0


class PreciseTimer:
    """Sleepers in a heap by due time; one timerfd armed for the earliest, read by the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL, fd: int) -> None:
        self._loop, self._libc, self._fd = loop, libc, fd
        self._clock = time.perf_counter_ns  # CLOCK_MONOTONIC, as the timerfd
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self.armed_for: int | None = None  # the due time the timerfd will fire at
        loop.add_reader(fd, self._fire)

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop) -> PreciseTimer | None:
        """A timer on `loop`, or None where the system gives no timerfd."""
        if _LIBC is None:
            return None
        fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        return cls(loop, _LIBC, fd)

    async def sleep_until(self, due_ns: int) -> None:
        if due_ns <= self._clock():
            return
        if self._fd < 0:
            raise RuntimeError("the shard's timer is closed")
        fut: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._sleepers, (due_ns, next(self._order), fut))
        if self.armed_for is None or due_ns < self.armed_for:
            self._arm(due_ns)
        await fut  # a cancelled sleeper stays in the heap, skipped when its time comes

    def _fire(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._fd, 8)  # the expiry count; reading it clears the fd's readiness
        self.armed_for = None
        now = self._clock()
        heap = self._sleepers
        while heap and heap[0][0] <= now:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)
        while heap and heap[0][2].done():  # cancelled: no reason to wake for them
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])

    def _arm(self, due_ns: int) -> None:
        if not _settime(self._libc, self._fd, due_ns):
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.armed_for = due_ns

    def close(self) -> None:
        if self._fd < 0:
            return
        if not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        for _, _, fut in self._sleepers:
            fut.cancel()
        self._sleepers.clear()


class PeriodicTimerFd:
    """A timerfd that expires every `interval_ns` from `first_ns` (absolute, CLOCK_MONOTONIC),
    for a loop to watch as a reader: the kernel counts the expirations the reader has not yet
    taken, so a late reader learns how many instants it missed."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc, self._fd = libc, fd

    @classmethod
    def open(cls, first_ns: int, interval_ns: int) -> PeriodicTimerFd | None:
        """An armed timer, or None where the system gives no timerfd."""
        if _LIBC is None:
            return None
        fd = _LIBC.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        timer = cls(_LIBC, fd)
        if not timer.arm(first_ns, interval_ns):
            timer.close()
            return None
        return timer

    def arm(self, first_ns: int, interval_ns: int) -> bool:
        """Expire every `interval_ns` from `first_ns` on (replacing any earlier arming and its
        count of expirations not yet taken); False when the kernel refused."""
        return _settime(self._libc, self._fd, first_ns, interval_ns)

    def disarm(self) -> None:
        """Expire no more until armed again. Setting the timer resets the kernel's count: take
        `expirations()` first."""
        _settime(self._libc, self._fd, 0)

    def fileno(self) -> int:
        return self._fd

    def expirations(self) -> int:
        """How many instants have passed since the last call (0 when none has)."""
        try:
            return int.from_bytes(os.read(self._fd, 8), sys.byteorder)
        except (BlockingIOError, InterruptedError):
            return 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def shard_timer(clock: Callable[[], int]) -> ShardTimer:
    """The most precise timer for `clock` on the running loop."""
    if reads_clock_monotonic(clock):
        timer = PreciseTimer.open(asyncio.get_running_loop())
        if timer is not None:
            return timer
    return LoopSleep(clock)


# the event loop's sleep may overshoot by a millisecond (epoll's timeout is in ms): `wake_at`
# sleeps in it to this long before the instant, in one blocking kernel sleep the rest
LOOP_SLEEP_MARGIN_NS = 3_000_000


async def wake_at(mono_ns: int) -> int:
    """Sleep to the instant `mono_ns` on time.perf_counter_ns (other tasks run until
    LOOP_SLEEP_MARGIN_NS before it) and return how late it woke, in ns. The last stretch is one
    kernel sleep (a high-resolution timer), not polled: pollers due at one instant would take
    the cores from the very processes whose start is due (a host's shards)."""
    wait_ns = mono_ns - time.perf_counter_ns() - LOOP_SLEEP_MARGIN_NS
    if wait_ns > 0:
        await asyncio.sleep(wait_ns / 1e9)
    while (left_ns := mono_ns - time.perf_counter_ns()) > 0:
        time.sleep(left_ns / 1e9)
    return time.perf_counter_ns() - mono_ns
