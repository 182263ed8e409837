"""The loop's record of its selector calls (loadgen/targets/loopwatch.py): the earliest a read's
bytes can have arrived, by the rules the module states, on set numbers; and the watch on a real
asyncio loop, read from a reader callback as the raw transport reads it."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

from loadgen.targets.loopwatch import GIL_SLACK_NS, LoopWatch, open_schedstat, run_queue_ns, watch

MS = 1_000_000


def _watch(
    prev: tuple[int, int], latest: tuple[int, int], woken_late: int = -1, could_wait: bool = True
) -> LoopWatch:
    w = LoopWatch()
    (w.prev_entered, w.prev_returned), (w.entered, w.returned) = prev, latest
    w.woken_late, w.could_wait = woken_late, could_wait
    return w


def test_a_call_that_returned_at_once_bounds_by_the_call_before() -> None:
    # call k-1 waited 0..20 ms, then a 7-ms stretch of callbacks, call k returned at once: the
    # bytes came after call k-1 collected its events (its return, less a GIL hand-over)
    w = _watch((0, 20 * MS), (27 * MS, 27 * MS + 10_000))
    assert w.floors(5 * MS) == (20 * MS - GIL_SLACK_NS,) * 2
    assert w.floors(22 * MS) == (22 * MS,) * 2  # drained later than that: the drain bounds


def test_bytes_that_woke_a_sleeping_call_came_at_its_wake_up() -> None:
    # call k slept from 30 to 45 ms, and its thread then waited 3 ms for a CPU (the kernel's
    # run-queue delay): the bytes came no earlier than 3 ms before the wake-up's floor
    w = _watch((0, 20 * MS), (30 * MS, 45 * MS), woken_late=3 * MS)
    assert w.floors(5 * MS) == (42 * MS - GIL_SLACK_NS,) * 2


def test_a_call_preempted_for_its_whole_length_did_not_sleep() -> None:
    # 15 ms in the call, 15 ms of it waiting for a CPU: bytes may have been ready at its entry,
    # so only the call before bounds them
    w = _watch((0, 20 * MS), (30 * MS, 45 * MS), woken_late=15 * MS)
    assert w.floors(5 * MS) == (20 * MS - GIL_SLACK_NS,) * 2


def test_a_call_that_could_not_wait_did_not_sleep() -> None:
    # callbacks were ready (timeout 0): however long it took, it was not waiting for bytes
    w = _watch((0, 20 * MS), (30 * MS, 45 * MS), woken_late=0, could_wait=False)
    assert w.floors(5 * MS) == (20 * MS - GIL_SLACK_NS,) * 2


def test_without_schedstat_the_narrow_floor_assumes_an_on_time_wake_up() -> None:
    # unmeasured: the narrow floor if the wake-up was on time, and the call before's in any case
    w = _watch((0, 20 * MS), (30 * MS, 45 * MS))
    assert w.floors(5 * MS) == (45 * MS - GIL_SLACK_NS, 20 * MS - GIL_SLACK_NS)


def test_no_earlier_call_no_bound_but_the_drain() -> None:
    w = _watch((0, 0), (30 * MS, 45 * MS))
    assert w.floors(5 * MS) == (5 * MS, 5 * MS)


def test_the_watch_on_a_real_loop_brackets_a_read() -> None:
    """Bytes another thread writes 60 ms after the loop began to wait: they wake its selector,
    and the reader callback's floors say so: the wide one no later than the write (the wait
    began before it), the narrow one no earlier (the selector returned after the bytes came)."""

    async def main() -> tuple[int, int, int, int, int]:
        loop = asyncio.get_running_loop()
        w = watch(loop)
        assert w is not None and watch(loop) is w  # installed once
        await asyncio.sleep(0)  # one watched iteration before the one that matters
        a, b = socket.socketpair()
        a.setblocking(False)
        got: asyncio.Future[tuple[int, int, int, int]] = loop.create_future()
        sent = [0]

        def readable() -> None:
            a.recv(16)
            if not got.done():
                got.set_result((*w.floors(0), w.entered, w.woken_late))

        def writer() -> None:
            time.sleep(0.06)
            sent[0] = time.perf_counter_ns()
            b.send(b"x")

        loop.add_reader(a.fileno(), readable)
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            lo, lo_any, entered, woken_late = await asyncio.wait_for(got, 5)
        finally:
            thread.join()
            loop.remove_reader(a.fileno())
            a.close()
            b.close()
        return sent[0], lo, lo_any, entered, woken_late

    sent, lo, lo_any, entered, woken_late = asyncio.run(main())
    assert lo_any <= sent <= lo + GIL_SLACK_NS + max(woken_late, 0)
    # the wait the narrow floor rules out (all but 40 ms of it however late the thread was run)
    assert lo - entered >= 20 * MS
    if woken_late >= 0:  # the kernel told how long the woken thread waited: one sure bound
        assert lo_any == lo
    else:
        assert lo_any < entered


def test_the_run_queue_wait_is_read_from_the_kernel() -> None:
    """On Linux with scheduler statistics, the watch reads this thread's run-queue delay."""
    fd = open_schedstat()
    if fd < 0:
        pytest.skip("no /proc/thread-self/schedstat here")
    try:
        first = run_queue_ns(fd)
        assert first >= 0
        time.sleep(0.01)
        assert run_queue_ns(fd) >= first  # a running total
    finally:
        os.close(fd)


def test_a_loop_without_a_selector_gets_no_watch() -> None:
    loop = asyncio.new_event_loop()
    selector = loop._selector  # type: ignore[attr-defined]
    try:
        loop._selector = None  # type: ignore[attr-defined]  # as uvloop's: none to watch
        assert watch(loop) is None
    finally:
        loop._selector = selector  # type: ignore[attr-defined]
        loop.close()
