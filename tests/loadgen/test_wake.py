"""A shard of a fleet wakes for its own first send, not every shard at the run's one start
instant (loadgen.engine.levels.wake_offset_ns, used by workers.shard_exec): the first send is
the one the level's schedule makes, and a shard that begins later still schedules every send
from the start."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from itertools import pairwise
from typing import Any

import pytest

from loadgen.engine.levels import WAKE_LEAD_NS, WAKE_SPAN_NS, first_send_s, wake_offset_ns
from loadgen.engine.plan import ShardPlan
from loadgen.engine.runner import run_shard
from loadgen.engine.timer import wake_at
from tests.loadgen.test_runner import ScriptedTarget, make_plan
from tests.support.memsink import MemorySink, ledger

MS = 1_000_000


def share(plan: ShardPlan, k: int, of: int) -> ShardPlan:
    """Shard k of `of` equal shards of `plan`'s load (the planner's fraction and its low end)."""
    return dataclasses.replace(plan, fraction=1 / of, extra={**plan.extra, "fraction_lo": k / of})


def load_of(plan: ShardPlan) -> Any:
    return plan.run_spec().load


@pytest.mark.parametrize("k", [0, 1, 5, 31, 57])
def test_the_shards_of_a_constant_rate_wake_one_after_another(k: int) -> None:
    """64 shards of 64 requests/s: shard k's first send is k/64 s after the start, and it
    wakes WAKE_LEAD_NS before it (shard 0, due at the start, at the start)."""
    plan = share(make_plan({"rate": [64.0], "arrival": "constant", "duration_s": 2.0}), k, 64)
    assert first_send_s(plan, load_of(plan)) == pytest.approx(k / 64, abs=1e-9)
    expected = max(0, round(k / 64 * 1e9) - WAKE_LEAD_NS)
    assert abs(wake_offset_ns(plan, load_of(plan)) - expected) <= 1


def test_sixty_four_shards_wake_apart_within_the_span() -> None:
    """Shards due past the span fold into it: no two of 64 shards wake within a millisecond
    of each other, and none after the span (the first tick, at 1 s, comes after every wake)."""
    plan = make_plan({"rate": [64.0], "arrival": "constant", "duration_s": 2.0})
    wakes = sorted(wake_offset_ns(share(plan, k, 64), load_of(plan)) for k in range(64))
    assert wakes[0] == 0 and wakes[-1] < WAKE_SPAN_NS < 1_000_000_000
    assert min(b - a for a, b in pairwise(wakes)) > 1 * MS


def test_a_closed_loop_wakes_at_the_start_and_a_far_first_send_in_the_span() -> None:
    closed = make_plan({"concurrency": [4], "duration_s": 1.0})
    assert first_send_s(closed, load_of(closed)) == 0.0
    assert wake_offset_ns(closed, load_of(closed)) == 0
    # 2 requests/s over 64 shards: shard 40's first send is 20 s in, folded into the span
    slow = share(make_plan({"rate": [2.0], "arrival": "constant", "duration_s": 60.0}), 40, 64)
    assert first_send_s(slow, load_of(slow)) == pytest.approx(20.0)
    assert wake_offset_ns(slow, load_of(slow)) == (20 * 10**9 - WAKE_LEAD_NS) % WAKE_SPAN_NS


def test_a_search_wakes_for_its_first_try() -> None:
    plan = share(
        make_plan(
            {
                "saturation": {"start": 8, "max": 32, "max_steps": 2},
                "arrival": "constant",
                "duration_s": 1.0,
            },
            slos=[{"metric": "ttft_ms", "percentile": 50, "threshold": 500}],
        ),
        3,
        8,
    )
    # its share of the first try: 1 request/s, the first at its phase 3/8 of a unit
    assert first_send_s(plan, load_of(plan)) == pytest.approx(3 / 8)


@pytest.mark.parametrize("arrival", ["constant", "poisson"])
def test_the_first_send_is_the_one_the_run_schedules_and_a_later_begin_keeps_it(
    arrival: str,
) -> None:
    """A shard begun at its wake (after the start) sends its first request at the start plus
    `first_send_s`, to the nanosecond of the schedule, and no send moves with the begin."""
    plan = share(make_plan({"rate": [40.0], "arrival": arrival, "duration_s": 1.0}), 3, 4)
    due_s = first_send_s(plan, load_of(plan))
    assert 0 < due_s < 1.0

    def run(begin_after_ns: int) -> list[int]:
        sink = MemorySink()
        start = time.perf_counter_ns() + 50 * MS
        result = asyncio.run(
            run_shard(
                plan,
                ScriptedTarget(ttft_s=0.004, tokens=1),
                sink,
                start_at_mono_ns=start,
                begin_at_mono_ns=start + begin_after_ns,
                wall_clock=time.perf_counter_ns,  # wall times on the monotonic clock itself
            )
        )
        ledger(sink.records, result.requests_scheduled)
        assert result.status == "completed"
        recs = sorted(sink.records, key=lambda r: r.index)
        return [r.scheduled_at_ns - start for r in recs]

    at_start = run(0)
    woken = run(wake_offset_ns(plan, load_of(plan)))
    # within two clock readings (the shard's wall and monotonic anchors), not one send later
    assert abs(at_start[0] - round(due_s * 1e9)) <= 50_000
    assert woken == pytest.approx(at_start, abs=50_000)  # the same schedule from the same start


def test_wake_at_never_returns_before_the_instant_and_says_how_late() -> None:
    async def main() -> tuple[int, int, int]:
        due = time.perf_counter_ns() + 20 * MS
        late = await wake_at(due)
        return due, late, time.perf_counter_ns()

    due, late, after = asyncio.run(main())
    assert 0 <= late <= after - due
    assert asyncio.run(wake_at(time.perf_counter_ns() - MS)) >= MS  # already past: at once
