"""The shard's timer (loadgen/engine/timer.py): never before the due time, in due order whatever
the order of the waits, a cancelled wait wakes nothing, and everything it opened is closed.
How precise it is, against asyncio.sleep, is bench/timer_lateness.py's figure, not a test's."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

import pytest

from loadgen.engine.timer import LoopSleep, PreciseTimer, shard_timer
from tests.loadgen.test_runner import ScriptedTarget, make_plan, run

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a timerfd is Linux's")
MS = 1_000_000
NS_S = 1_000_000_000


def open_timerfds() -> int:
    links = []
    for n in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{n}"))
        except OSError:  # the listing's own descriptor, closed since
            continue
    return sum(1 for link in links if "timerfd" in link)


def test_the_precise_timer_is_chosen_for_the_monotonic_clock_only() -> None:
    async def kinds() -> list[type]:
        out = []
        for clock in (time.perf_counter_ns, time.monotonic_ns, lambda: 0):
            timer = shard_timer(clock)
            out.append(type(timer))
            timer.close()
        return out

    expected = PreciseTimer if sys.platform.startswith("linux") else LoopSleep
    assert asyncio.run(kinds()) == [expected, expected, LoopSleep]


@linux_only
def test_waits_end_in_due_order_and_never_before_their_time() -> None:
    rng = random.Random(7)

    async def main() -> list[tuple[int, int]]:
        timer = shard_timer(time.perf_counter_ns)
        assert isinstance(timer, PreciseTimer)
        base = time.perf_counter_ns() + 20 * MS
        dues = [base + rng.randrange(0, 150 * MS) for _ in range(200)]
        woke: list[tuple[int, int]] = []

        async def wait(due: int) -> None:
            await timer.sleep_until(due)
            woke.append((due, time.perf_counter_ns()))

        try:
            await asyncio.gather(*(wait(d) for d in dues))  # started in random due order
        finally:
            timer.close()
        return woke

    woke = asyncio.run(main())
    assert len(woke) == 200
    assert all(now >= due for due, now in woke), "a wait ended before its due time"
    assert [d for d, _ in woke] == sorted(d for d, _ in woke)


@linux_only
def test_a_later_wait_armed_first_does_not_hold_back_an_earlier_one() -> None:
    async def main() -> tuple[list[int | None], int]:
        timer = shard_timer(time.perf_counter_ns)
        assert isinstance(timer, PreciseTimer)
        t0 = time.perf_counter_ns()
        late = asyncio.create_task(timer.sleep_until(t0 + 400 * MS))
        await asyncio.sleep(0)
        armed = [timer.armed_for]
        early = asyncio.create_task(timer.sleep_until(t0 + 30 * MS))
        await asyncio.sleep(0)
        armed.append(timer.armed_for)
        await early
        armed.append(timer.armed_for)
        await late
        timer.close()
        return armed, t0

    armed, t0 = asyncio.run(main())
    # re-armed for the earlier wait, then for the later one once the earlier ended
    assert armed == [t0 + 400 * MS, t0 + 30 * MS, t0 + 400 * MS]


@linux_only
def test_a_cancelled_wait_wakes_nothing_and_the_others_still_do() -> None:
    async def main() -> list[str]:
        timer = shard_timer(time.perf_counter_ns)
        t0 = time.perf_counter_ns()
        order: list[str] = []

        async def wait(name: str, due: int) -> None:
            await timer.sleep_until(due)
            order.append(name)

        first = asyncio.create_task(wait("cancelled", t0 + 20 * MS))
        second = asyncio.create_task(wait("second", t0 + 60 * MS))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
        timer.close()
        return order

    assert asyncio.run(main()) == ["second"]


@linux_only
def test_closing_cancels_waits_and_releases_the_descriptor() -> None:
    async def main() -> tuple[bool, int]:
        timer = shard_timer(time.perf_counter_ns)
        assert isinstance(timer, PreciseTimer)
        opened = open_timerfds()
        waiting = asyncio.create_task(timer.sleep_until(time.perf_counter_ns() + 10 * NS_S))
        await asyncio.sleep(0)
        timer.close()
        await asyncio.gather(waiting, return_exceptions=True)
        return waiting.cancelled(), opened

    before = open_timerfds()
    cancelled, opened = asyncio.run(main())
    assert cancelled
    assert opened == before + 1 and open_timerfds() == before


def test_a_due_time_already_past_returns_without_yielding() -> None:
    async def main() -> list[str]:
        steps: list[str] = []
        timer = shard_timer(time.perf_counter_ns)

        async def other() -> None:
            steps.append("other")

        task = asyncio.create_task(other())
        await timer.sleep_until(time.perf_counter_ns() - 1)
        steps.append("past")
        await task
        timer.close()
        return steps

    assert asyncio.run(main()) == ["past", "other"]


@linux_only
def test_a_shard_closes_its_timer_when_it_ends() -> None:
    before = open_timerfds()
    plan = make_plan({"rate": [40.0], "arrival": "constant", "duration_s": 0.3})
    result, sink = run(plan, ScriptedTarget())
    assert result.status == "completed" and len(sink.records) == 12
    assert open_timerfds() == before
