"""What held the generator back (loadgen.engine.lateness): each meter sees its cause for real — a
process competing for the same CPU, a thread of ours burning CPU, a collection — and the
self-check's verdict names the largest one when it flags, or says none of them explains it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time

import pytest

from loadgen.engine.health import SelfCheck
from loadgen.engine.lateness import CauseMeter, Causes, name_cause
from loadgen.runspec.spec import ValiditySpec

linux = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="needs /proc")


def _spin(cpu_s: float, wall_s: float = 20.0) -> None:
    """Burn `cpu_s` of this thread's CPU (at most `wall_s` of wall time: the host is shared)."""
    cpu_end = time.thread_time() + cpu_s
    wall_end = time.perf_counter() + wall_s
    while time.thread_time() < cpu_end and time.perf_counter() < wall_end:
        pass


@linux
def test_a_process_on_the_same_cpu_shows_as_run_queue_wait() -> None:
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.3)  # the hog is pinned and spinning
        meter = CauseMeter()
        _spin(0.3)  # both want the one CPU: ours waits on the run queue about half the time
        got = meter.take()
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()
    assert got.runq_wait_ms > 100, got
    assert got.gc_ms < 50


@linux
@pytest.mark.serial  # CPU time of threads measured against wall-clock bounds
# its gc.collect() also finalizes what earlier tests in this process left unclosed: not ours
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_another_thread_s_cpu_and_a_collection_are_metered() -> None:
    meter = CauseMeter()
    t = threading.Thread(target=_spin, args=(0.3,))
    t.start()
    t.join()  # the thread has ended: its CPU still counts
    junk = [[i] for i in range(200_000)]
    gc.collect()
    del junk
    got = meter.take()
    assert got.threads_cpu_ms > 150, got
    assert got.gc_ms > 0.5, got
    # the collection ran on this (the loop's) thread: over a long-lived test process's heap it
    # alone can take hundreds of ms; the spinning thread's CPU must not be the loop's
    assert got.loop_cpu_ms < got.threads_cpu_ms + got.gc_ms + 200


def test_the_largest_cause_is_named_or_none_is() -> None:
    starved = [Causes(runq_wait_ms=40, loop_cpu_ms=20, threads_cpu_ms=3, gc_ms=1)] * 5
    assert "CPU starvation" in name_cause(starved, 5.0) and "200 ms" in name_cause(starved, 5.0)
    gil = [Causes(runq_wait_ms=2, loop_cpu_ms=30, threads_cpu_ms=300, gc_ms=1)] * 2
    assert "other threads of this process ran 600 ms" in name_cause(gil, 2.0)
    collected = [Causes(gc_ms=80.0)]
    assert "garbage collection paused the loop for 80 ms" in name_cause(collected, 1.0)
    busy = [Causes(loop_cpu_ms=950.0)] * 3  # a loop at 95 % of a core
    assert "the event loop itself was busy" in name_cause(busy, 3.0)
    quiet = [Causes(runq_wait_ms=1, loop_cpu_ms=40, threads_cpu_ms=1, gc_ms=0.5)] * 4
    text = name_cause(quiet, 4.0)
    assert "late for another reason" in text and "4 ms waiting for a CPU" in text


def test_a_flagged_self_check_names_its_cause() -> None:
    now = [0]
    check = SelfCheck(lambda: now[0], activity=lambda: 0)
    v = ValiditySpec()
    for _ in range(3):  # three "seconds", each with a send 30 ms late, the generator idle
        check.dispatch_second.append(30.0)
        time.sleep(0.2)
        check.take_second()
    ok, reasons, health = check.verdict(v)
    assert not ok and len(reasons) == 2, reasons
    assert "dispatch delay p99" in reasons[0] and reasons[1].startswith("cause")
    assert health["late_s"] > 0 and set(health) >= {
        "late_runq_wait_ms",
        "late_loop_cpu_ms",
        "late_threads_cpu_ms",
        "late_gc_ms",
    }
    fine = SelfCheck(lambda: now[0], activity=lambda: 0)
    fine.dispatch_second.append(0.5)
    time.sleep(0.2)
    fine.take_second()
    assert fine.verdict(v)[:2] == (True, [])  # nothing flagged, no cause
