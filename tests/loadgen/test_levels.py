"""The level loop alone, against a scripted target: an aborted level's span and steady window
end where the shard stopped (so its rates divide by the time it ran), and the between-levels
policies leave each level's requests where the spec says."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from analysis import metrics as m
from loadgen.engine.levels import NEXT_LEVEL_LEAD_NS, next_level_start
from loadgen.engine.pool import LocalPool, Pooled
from loadgen.engine.runner import ShardResult, run_shard
from loadgen.engine.shard import NS
from loadgen.results.records import Outcome
from tests.loadgen.test_runner import ScriptedTarget, make_plan, run
from tests.support.memsink import MemorySink, ledger


def test_an_aborted_level_is_cut_where_the_run_stopped() -> None:
    target = ScriptedTarget(ttft_s=0.01, itl_s=0.01, tokens=5)
    plan = make_plan({"concurrency": [2, 2], "duration_s": 30.0, "warmup_s": 0.2})

    async def main() -> tuple[ShardResult, MemorySink, int]:
        sink = MemorySink()
        abort = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, abort.set)
        t0 = time.time_ns()
        return await run_shard(plan, target, sink, abort=abort), sink, t0

    result, sink, t0 = asyncio.run(main())
    ledger(sink.records, result.requests_scheduled)
    assert result.status == "aborted"
    (lv,) = result.levels  # level 1 never began
    ran_s = (lv.ended_wall_ns - lv.started_wall_ns) / 1e9
    assert 0.5 < ran_s < 5.0  # stopped ~1 s in, not the planned 30 s
    assert lv.steady_end_wall_ns == lv.ended_wall_ns
    steady_s = (lv.steady_end_wall_ns - lv.steady_start_wall_ns) / 1e9
    assert steady_s == pytest.approx(ran_s - 0.2, abs=1e-6)
    assert lv.drained_wall_ns is None
    assert lv.started_wall_ns >= t0


def test_drain_cancel_and_overlap_between_two_levels() -> None:
    # each answer lasts ~1 s; levels of 0.5 s: every first request runs past the end
    load = {"concurrency": [2, 2], "duration_s": 0.5}
    got = {}
    for policy in ("drain", "cancel", "overlap"):
        plan = make_plan({**load, "between_levels": policy})
        result, sink = run(plan, ScriptedTarget(ttft_s=0.02, itl_s=0.05, tokens=20))
        l0, l1 = result.levels
        level0 = [r for r in sink.records if r.level == 0]
        last_end = max(r.scheduled_at_ns + (r.end_ns or 0) for r in level0)
        got[policy] = (l0, l1, level0, last_end)
    l0, l1, level0, last_end = got["drain"]
    assert last_end <= l1.started_wall_ns and l0.drained_wall_ns is not None
    assert all(r.outcome is Outcome.OK for r in level0)
    l0, l1, level0, last_end = got["cancel"]
    cut = [r for r in level0 if r.outcome is Outcome.CANCELLED]
    assert len(cut) == 2 and all(r.error_phase == "level_ended" for r in cut)
    assert all(0 < sum(r.chunk_tokens) < 20 for r in cut)  # partial tokens kept
    assert last_end <= l1.started_wall_ns
    l0, l1, level0, last_end = got["overlap"]
    assert l1.started_wall_ns == l0.ended_wall_ns < last_end
    assert {lv.between_levels for lv in (l0, l1)} == {"overlap"}
    assert m.Window(l1.steady_start_wall_ns, l1.steady_end_wall_ns).seconds == pytest.approx(0.5)


def test_shards_of_one_run_start_each_level_together_after_all_drained() -> None:
    """Two shards sharing a LocalPool: shard b's answers take three times longer, so it drains
    later; shard a waits for it, and no level-0 request of either shard is in flight once
    either shard's level 1 has begun."""
    base = make_plan({"concurrency": [2, 2], "duration_s": 0.5})
    plans = [dataclasses.replace(base, shard_id=f"{x}-0", region=x) for x in ("a", "b")]
    targets = [
        ScriptedTarget(ttft_s=0.02, itl_s=0.03, tokens=10),
        ScriptedTarget(ttft_s=0.02, itl_s=0.09, tokens=10),
    ]
    sinks = [MemorySink(), MemorySink()]
    pool = LocalPool(2)

    async def both() -> list[ShardResult]:
        start = time.perf_counter_ns() + 50_000_000
        return list(
            await asyncio.gather(
                *(
                    run_shard(p, t, s, start_at_mono_ns=start, pool=pool)
                    for p, t, s in zip(plans, targets, sinks, strict=True)
                )
            )
        )

    ra, rb = asyncio.run(both())
    first_start = min(ra.levels[1].started_wall_ns, rb.levels[1].started_wall_ns)
    ends0 = [r.scheduled_at_ns + (r.end_ns or 0) for s in sinks for r in s.records if r.level == 0]
    assert max(ends0) <= first_start
    assert abs(ra.levels[1].started_wall_ns - rb.levels[1].started_wall_ns) < 50_000_000
    assert ra.levels[0].drained_wall_ns is not None and rb.levels[0].drained_wall_ns is not None
    assert ra.levels[0].drained_wall_ns < rb.levels[0].drained_wall_ns  # a waited for b


class _ShardClock:
    """What `next_level_start` reads of a shard: its clock and its wall-clock mapping."""

    def __init__(self, now: int, wall_minus_mono: int) -> None:
        self.now, self.offset = now, wall_minus_mono

    def clock(self) -> int:
        return self.now

    def mono(self, wall_ns: int) -> int:
        return wall_ns - self.offset


def test_the_next_level_starts_at_one_instant_after_the_pool_closed() -> None:
    shard: Any = _ShardClock(now=10 * NS, wall_minus_mono=1_000 * NS)
    closed_mono = 10 * NS - NEXT_LEVEL_LEAD_NS // 2  # the shard sees the close a little after
    closed = Pooled({}, ("a",), closed_at_ref_ns=closed_mono + 1_000 * NS)
    # the common instant has not come yet: the shard starts then, not when it saw the close
    assert next_level_start(shard, 9 * NS, closed) == closed_mono + NEXT_LEVEL_LEAD_NS
    # past the instant already: at once (late, and its level's start says so)
    shard.now = 12 * NS
    assert next_level_start(shard, 9 * NS, closed) == 12 * NS
    # a level still running past the instant starts its successor at its end
    assert next_level_start(shard, 13 * NS, closed) == 13 * NS
    # a pool with no clock (one process's shards): at the end, or now
    shard.now = 10 * NS
    assert next_level_start(shard, 9 * NS, Pooled({}, ("a",))) == 10 * NS
    assert next_level_start(shard, 9 * NS, None) == 10 * NS
