"""The Redis sample pool against a real Redis (PEAKLOAD_TEST_REDIS_URL, else a redis-server of
the test's own): shards meeting, a missing shard closing the pool after the bound, a late shard
getting exactly the closed set, and keys that expire."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from loadgen.engine.pool import Pooled
from loadgen.engine.search import judge
from loadgen.runspec.spec import spec_from_dict
from tests.support.celery_workers import RedisServer
from workers.sample_pool import RedisPool

pytestmark = pytest.mark.integration

IDS = ["eu-0", "us-0", "us-1"]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    url = os.environ.get("PEAKLOAD_TEST_REDIS_URL", "").strip()
    if url:
        yield url
        return
    server = RedisServer(tmp_path)
    yield server.url(0)
    server.stop()


def _pool(url: str, run_id: str, wait_s: float = 30.0) -> RedisPool:
    return RedisPool(url, run_id, IDS, wait_s=wait_s, ttl_s=120)


def _samples(sid: str) -> dict[str, list[float]]:
    k = IDS.index(sid)
    return {"ttft_ms": [10.0 * k, 10.0 * k + 1, float("inf")], "e2e_ms": [100.0 + k]}


async def _hand_in(url: str, run_id: str, run: int, sids: list[str], wait_s: float) -> list[Pooled]:
    pools = [_pool(url, run_id, wait_s) for _ in sids]  # one client per shard, as on workers
    try:
        return list(
            await asyncio.gather(
                *(p.pool(run, sid, _samples(sid)) for p, sid in zip(pools, sids, strict=True))
            )
        )
    finally:
        for p in pools:
            await p.aclose()


def test_every_shard_gets_every_shards_samples(redis_url: str) -> None:
    run_id = str(uuid.uuid4())
    got = asyncio.run(_hand_in(redis_url, run_id, 0, ["us-1", "eu-0", "us-0"], 30.0))
    want = {
        "ttft_ms": [0.0, 1.0, float("inf"), 10.0, 11.0, float("inf"), 20.0, 21.0, float("inf")],
        "e2e_ms": [100.0, 101.0, 102.0],
    }
    for p in got:
        assert p.samples == want  # in shard-id order, inf (a miss) kept
        assert p.shards == tuple(IDS) and p.complete
    with redis.Redis.from_url(redis_url) as r:
        keys = list(r.scan_iter(f"peakload:pool:{run_id}:*"))
        parts = {k.decode().rsplit(":", 1)[1] for k in keys}
        # the go list (one item per planned shard, a waiter takes one) may be used up
        assert {"members", "data", "closed"} <= parts <= {"members", "data", "closed", "go"}
        assert all(0 < r.ttl(k) <= 120 for k in keys)  # cleaned up by expiry


def test_every_shard_gets_the_one_instant_the_pool_closed_on_redis_s_clock(
    redis_url: str,
) -> None:
    """The instant the shards' next level starts from: Redis's clock (the run's reference,
    workers/clocks.py) when the last shard closed the pool, the same for each, a late one too."""
    run_id = str(uuid.uuid4())
    with redis.Redis.from_url(redis_url) as r:
        sec, usec = r.time()
        before = sec * 1_000_000_000 + usec * 1000
        got = asyncio.run(_hand_in(redis_url, run_id, 0, IDS, 30.0))
        late = asyncio.run(_hand_in(redis_url, run_id, 0, ["us-0"], 30.0))
        sec, usec = r.time()
        after = sec * 1_000_000_000 + usec * 1000
    instants = {p.closed_at_ref_ns for p in [*got, *late]}
    assert len(instants) == 1
    (closed,) = instants
    assert closed is not None and before <= closed <= after


def test_a_missing_shard_closes_the_pool_and_a_late_one_gets_the_closed_set(
    redis_url: str,
) -> None:
    run_id = str(uuid.uuid4())
    t0 = time.monotonic()
    early = asyncio.run(_hand_in(redis_url, run_id, 0, ["eu-0", "us-0"], 0.5))
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 5.0  # the bound ended the wait
    for p in early:
        assert p.shards == ("eu-0", "us-0") and p.missing == ("us-1",) and not p.complete
    # us-1 hands in after the close: it decides on exactly the closed set, not its own samples
    (late,) = asyncio.run(_hand_in(redis_url, run_id, 0, ["us-1"], 30.0))
    assert late == early[0]
    spec = spec_from_dict(
        {
            "name": "t",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "load": {"saturation": {"start": 1, "max": 2}, "duration_s": 1},
            "slos": [{"metric": "ttft_ms", "percentile": 50, "threshold": 15}],
        }
    )
    assert judge(spec, late.samples, 0.9) == judge(spec, early[1].samples, 0.9)
    # the next level run expects only the shards the last pool closed with: no second wait
    t1 = time.monotonic()
    nxt = asyncio.run(_hand_in(redis_url, run_id, 1, ["eu-0", "us-0"], 30.0))
    assert time.monotonic() - t1 < 5.0
    assert all(p.shards == ("eu-0", "us-0") and p.missing == ("us-1",) for p in nxt)


def test_a_shard_back_in_time_is_pooled_again(redis_url: str) -> None:
    """A shard left out of one pool that hands in before the next one closes is in it."""
    run_id = str(uuid.uuid4())
    asyncio.run(_hand_in(redis_url, run_id, 0, ["eu-0", "us-0"], 0.3))

    async def next_run() -> list[Pooled]:
        late = asyncio.create_task(_hand_in(redis_url, run_id, 1, ["us-1"], 30.0))
        await asyncio.sleep(0.2)
        rest = await _hand_in(redis_url, run_id, 1, ["eu-0", "us-0"], 30.0)
        return [*(await late), *rest]

    for p in asyncio.run(next_run()):
        assert p.shards == tuple(IDS) and p.complete


def test_redis_restarting_mid_wait_neither_fails_the_shard_nor_splits_the_pool(
    tmp_path: Path,
) -> None:
    """Redis killed while a shard waits (its keys lost: no persistence) and started again: the
    shard keeps trying, closes the pool at the bound with itself in it, and a shard handing in
    after that gets the same closed set."""
    server = RedisServer(tmp_path)
    try:
        url, run_id = server.url(0), str(uuid.uuid4())

        async def first() -> Pooled:
            pool = RedisPool(url, run_id, ["eu-0", "us-0"], wait_s=3.0, ttl_s=120)
            try:
                return await pool.pool(0, "eu-0", {"ttft_ms": [1.0]})
            finally:
                await pool.aclose()

        async def scenario() -> tuple[Pooled, Pooled]:
            waiting = asyncio.create_task(first())
            await asyncio.sleep(0.3)
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(server.start)
            early = await waiting
            late = RedisPool(url, run_id, ["eu-0", "us-0"], wait_s=3.0, ttl_s=120)
            try:
                return early, await late.pool(0, "us-0", {"ttft_ms": [2.0]})
            finally:
                await late.aclose()

        early, late = asyncio.run(scenario())
        assert early == late
        assert early.shards == ("eu-0",) and early.missing == ("us-0",)
        assert early.samples == {"ttft_ms": [1.0]}
    finally:
        server.stop()


def test_a_shard_cut_short_leaves_one_pooled_answer(redis_url: str) -> None:
    """Two shards search together through the Redis pool; b-0's search is cut short by its
    deadline (as a Celery soft time limit does, loadgen.engine.runner) while a-0 searches on without
    it once the pool's bound passes. b-0's answer is a prefix of a-0's, and the run's stored
    answer (workers.store.runs.merge_searches) is a-0's complete one, b-0 named as stopped."""
    import dataclasses

    from analysis.reports.summary_table import search_line
    from loadgen.engine.runner import ShardResult, run_shard
    from tests.loadgen.test_runner import make_plan
    from tests.loadgen.test_search import SLO, RateTarget
    from tests.support.memsink import MemorySink
    from workers.store.searches import merge_searches

    load = {
        "saturation": {"start": 30, "max": 480, "max_steps": 4, "confidence": 0.9},
        "arrival": "constant",
        "duration_s": 1.0,
        "warmup_s": 0.2,
        "cooldown_s": 0.1,
    }
    base = make_plan(load, slos=[SLO], max_error_rate=1.0)  # the budget is not the subject
    ids = ["a-0", "b-0"]
    plans = [
        dataclasses.replace(base, shard_id=sid, region=sid[0], fraction=0.5, seed=k)
        for k, sid in enumerate(ids)
    ]
    run_id = uuid.uuid4().hex

    async def both() -> list[ShardResult]:
        pools = [RedisPool(redis_url, run_id, ids, wait_s=3.0, ttl_s=120) for _ in ids]
        start = time.perf_counter_ns() + 50_000_000
        try:
            return list(
                await asyncio.gather(
                    *(
                        run_shard(
                            p,
                            RateTarget(per_second=10**9),
                            MemorySink(),
                            start_at_mono_ns=start,
                            pool=pool,
                            # b-0 stops during its second or third level
                            deadline_mono_ns=start + 2_600_000_000 if p.shard_id == "b-0" else None,
                        )
                        for p, pool in zip(plans, pools, strict=True)
                    )
                )
            )
        finally:
            for pool in pools:
                await pool.aclose()

    ra, rb = asyncio.run(both())
    assert ra.status == "completed" and rb.status == "timed_out"
    assert ra.search is not None and rb.search is not None
    full, cut = ra.search["tried"], rb.search["tried"]
    assert len(full) == 4 and len(cut) < len(full) and cut == full[: len(cut)]
    assert ra.search["missing_shards"] == ["b-0"]  # a-0's later pools closed without b-0
    merged = merge_searches({"a-0": ra.search, "b-0": rb.search})
    assert "per_shard" not in merged and merged["pooled"] is True
    assert merged["tried"] == full and merged["highest_passing"] == ra.search["highest_passing"]
    assert merged["stopped_early"] == ["b-0"]
    assert merged["pool_complete"] is False and merged["missing_shards"] == ["b-0"]
    line = search_line({"search": merged})
    assert line is not None and "not pooled" not in line and "b-0 stopped" in line


def test_a_waiting_shard_wakes_when_the_pool_closes_not_at_a_poll(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiters block on the pool's go list: with their re-check 60 s apart, the first shards
    still return as soon as the last one closes the pool."""
    monkeypatch.setattr("workers.sample_pool.WAKE_S", 60.0)
    run_id = str(uuid.uuid4())

    async def main() -> float:
        early = asyncio.create_task(_hand_in(redis_url, run_id, 0, ["eu-0", "us-0"], 120.0))
        await asyncio.sleep(0.5)  # both wait in their block
        t0 = time.monotonic()
        await _hand_in(redis_url, run_id, 0, ["us-1"], 120.0)
        got = await early
        assert all(p.complete for p in got)
        return time.monotonic() - t0

    assert asyncio.run(main()) < 30.0


def test_a_pool_connects_before_the_run_and_a_dead_redis_costs_only_the_bound(
    redis_url: str,
) -> None:
    """A shard opens its pool's connection before the start (at the first level's end every
    shard of a host connecting at once took 0.4-0.6 s more of the first barrier: bench/fleet.py);
    a Redis that does not answer costs at most the bound there, and the first pool retries."""

    async def connected_clients(url: str) -> int:
        pool = _pool(url, str(uuid.uuid4()))
        try:
            before = len(redis.Redis.from_url(redis_url).client_list())
            await pool.connect(5.0)
            return len(redis.Redis.from_url(redis_url).client_list()) - before
        finally:
            await pool.aclose()

    assert asyncio.run(connected_clients(redis_url)) >= 1

    async def dead() -> float:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pool = _pool(f"redis://127.0.0.1:{port}/0", str(uuid.uuid4()))
        t0 = time.monotonic()
        try:
            await pool.connect(1.0)
        finally:
            await pool.aclose()
        return time.monotonic() - t0

    assert asyncio.run(dead()) < 1.5


def test_a_shard_that_leaves_is_not_waited_for_now_or_later(redis_url: str) -> None:
    """us-1 stops early and says so (workers/shard_exec.py on a soft time limit): the two
    waiting in level run 0 close at once without it, not after the 30-s bound, and level run 1
    does not wait for it either; a shard that left before anyone handed in is skipped too."""
    run_id = str(uuid.uuid4())

    async def scenario() -> tuple[list[Pooled], float, Pooled, float]:
        waiting = asyncio.ensure_future(_hand_in(redis_url, run_id, 0, ["eu-0", "us-0"], 30.0))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        leaver = _pool(redis_url, run_id)
        t0 = time.monotonic()
        await leaver.leave("us-1", timeout_s=2.0)
        await leaver.aclose()
        first = await waiting
        closed_after = time.monotonic() - t0
        t1 = time.monotonic()
        second = await _hand_in(redis_url, run_id, 1, ["eu-0", "us-0"], 30.0)
        return first, closed_after, second[0], time.monotonic() - t1

    first, closed_after, second, second_s = asyncio.run(scenario())
    assert closed_after < 5.0 and second_s < 5.0  # the bound is 30 s
    for p in (*first, second):
        assert p.shards == ("eu-0", "us-0") and p.missing == ("us-1",)
    assert first[0].samples == first[1].samples  # one answer

    early = str(uuid.uuid4())  # left before anyone handed in at level run 0

    async def before() -> list[Pooled]:
        leaver = _pool(redis_url, early)
        await leaver.leave("eu-0", timeout_s=2.0)
        await leaver.aclose()
        return await _hand_in(redis_url, early, 0, ["us-0", "us-1"], 30.0)

    t2 = time.monotonic()
    got = asyncio.run(before())
    assert time.monotonic() - t2 < 5.0
    assert all(p.shards == ("us-0", "us-1") and p.missing == ("eu-0",) for p in got)
