"""Continuous batching: the engine model's arithmetic (driven by a manual clock), and the real sim
showing a knee — throughput saturates at `slots` while latency keeps growing — and KV queueing."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from pathlib import Path
from typing import Any, cast

import httpx

from loadgen.sim.config import SimConfig
from loadgen.sim.engine import Action, BatchEngine, Scheduler
from tests.loadgen.sim.helpers import chat_body
from tests.support.sim import start_sim


class ManualScheduler:
    """Runs actions in due order without a clock: the engine model's times, exactly."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Action]] = []
        self.seq = itertools.count()

    def at(self, due_ns: int, action: Action) -> None:
        heapq.heappush(self.heap, (due_ns, next(self.seq), action))

    def run(self) -> None:
        while self.heap:
            due, _, action = heapq.heappop(self.heap)
            action(due)


class Seq:
    def __init__(self, prompt: int, max_tokens: int) -> None:
        self.prompt_tokens = prompt
        self.max_tokens = max_tokens
        self.admitted_ns = -1
        self.times: list[int] = []

    def on_token(self, due_ns: int) -> bool:
        self.times.append(due_ns)
        return len(self.times) == self.max_tokens


def _engine(**kw: Any) -> tuple[BatchEngine, ManualScheduler]:
    sched = ManualScheduler()
    cfg = SimConfig(mode="batching", **kw)
    return BatchEngine(cfg, cast(Scheduler, sched)), sched


def test_step_time_grows_with_batch_and_prefill() -> None:
    eng, sched = _engine(
        slots=8, decode_step_ms=10, decode_step_ms_per_seq=2, prefill_tokens_per_s=1000
    )
    a, b = Seq(prompt=5, max_tokens=3), Seq(prompt=5, max_tokens=3)
    eng.submit(a, 0)
    eng.submit(b, 0)  # arrives while the first step runs: admitted at its end
    sched.run()
    ms = 1_000_000
    # step 1: a alone, 10 + 2*1 + 5 prefill = 17 ms; step 2: a + b, 10 + 4 + 5 = 19 ms;
    # step 3: 14 ms; step 4: b alone, 12 ms.
    assert a.times == [17 * ms, 36 * ms, 50 * ms]
    assert b.times == [36 * ms, 50 * ms, 62 * ms]
    assert eng.kv_used == 0 and eng.running == 0 and eng.waiting == 0


def test_slots_and_kv_budget_queue_requests() -> None:
    eng, sched = _engine(
        slots=2, decode_step_ms=10, decode_step_ms_per_seq=0, kv_capacity_tokens=1000
    )
    seqs = [Seq(prompt=0, max_tokens=4) for _ in range(3)]
    for s in seqs:
        eng.submit(s, 0)
    assert eng.running == 1 and eng.waiting == 2  # arrivals during a step wait for its end
    sched.run()
    ms = 1_000_000
    assert seqs[1].times == [20 * ms, 30 * ms, 40 * ms, 50 * ms]
    assert seqs[2].times[0] == 50 * ms  # no slot until seqs[0] finished at 40 ms
    eng, sched = _engine(
        slots=8,
        decode_step_ms=10,
        decode_step_ms_per_seq=0,
        kv_capacity_tokens=10,
        prefill_tokens_per_s=1e12,
    )
    seqs = [Seq(prompt=2, max_tokens=3) for _ in range(3)]  # 5 tokens of KV each: two fit
    for s in seqs:
        eng.submit(s, 0)
    assert eng.running == 1 and eng.kv_used == 5 and eng.waiting == 2
    sched.run()
    assert seqs[2].times[0] == 40 * ms


async def _burst(url: str, n: int, max_tokens: int) -> float:
    """n concurrent streams; returns seconds until the last finished (client side)."""
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=n)) as c:

        async def one() -> None:
            async with c.stream("POST", url, json=chat_body(max_tokens=max_tokens)) as r:
                assert r.status_code == 200
                async for _ in r.aiter_raw():
                    pass

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t0


def _level_stats(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(tokens/s by the engine's own due times, mean request latency s) for one burst."""
    start = min(r["request_ns"] for r in rows)
    end = max(r["chunk_due_ns"][-1] for r in rows)
    tokens = sum(r["completion_tokens"] for r in rows)
    mean_latency = sum(r["chunk_due_ns"][-1] - r["request_ns"] for r in rows) / len(rows)
    return tokens / ((end - start) / 1e9), mean_latency / 1e9


def test_knee_past_slots(tmp_path: Path) -> None:
    """step = 10 + 5 * batch ms, 4 slots: tokens/s rises 1 -> 4 streams, then stays flat at 8
    while mean latency grows by the queueing."""
    cfg = tmp_path / "knee.json"
    cfg.write_text(
        '{"mode": "batching", "slots": 4, "decode_step_ms": 10, "decode_step_ms_per_seq": 5,'
        ' "prefill_tokens_per_s": 1000000}'
    )
    stats = {}
    with start_sim(["--config", str(cfg)], tmp_path) as sp:
        url = sp.base_url + "/chat/completions"
        seen = 0
        for n in (1, 4, 8):
            asyncio.run(_burst(url, n, max_tokens=10))
            rows = sp.wait_truth(seen + n)[seen:]
            assert len(rows) == n
            seen += n
            stats[n] = _level_stats(rows)
    (t1, _), (t4, l4), (t8, l8) = stats[1], stats[4], stats[8]
    assert t4 > 1.5 * t1  # batching pays below the knee (model: 67 -> 133 tokens/s)
    assert 0.8 * t4 < t8 < 1.2 * t4  # saturated past it
    assert l8 > 1.3 * l4  # latency keeps growing: half of the 8 wait for a slot


def test_kv_capacity_queues_and_shows_in_metrics(tmp_path: Path) -> None:
    cfg = tmp_path / "kv.json"
    cfg.write_text(
        '{"mode": "batching", "slots": 8, "decode_step_ms": 40, "decode_step_ms_per_seq": 0,'
        ' "kv_capacity_tokens": 60}'
    )
    with start_sim(["--config", str(cfg)], tmp_path) as sp:
        url = sp.base_url + "/chat/completions"
        metrics_url = sp.base_url.removesuffix("/v1") + "/metrics"

        async def run() -> tuple[str, str]:
            task = asyncio.ensure_future(_burst(url, 4, max_tokens=16))
            async with httpx.AsyncClient() as c:
                # the sim's gauges once all four arrived (a loaded host sends them later than
                # a quiet one), while the first three still decode (16 steps of 40 ms)
                deadline = asyncio.get_running_loop().time() + 10.0
                while True:
                    text = (await c.get(metrics_url)).text
                    arrived = "num_requests_waiting 1" in text or task.done()
                    if arrived or asyncio.get_running_loop().time() > deadline:
                        break
                    await asyncio.sleep(0.02)
                await task
                after = (await c.get(metrics_url)).text
            return text, after

        metrics, after = asyncio.run(run())
        rows = sorted(sp.wait_truth(4), key=lambda r: r["chunk_due_ns"][0])
        big = httpx.post(url, json=chat_body(max_tokens=100, stream=False))
    # each request needs 4 prompt + 16 output = 20 tokens of KV: three fit in 60, one waits
    assert "peakload_sim:num_requests_running 3" in metrics
    assert "peakload_sim:num_requests_waiting 1" in metrics
    assert "peakload_sim:kv_cache_usage_perc 1" in metrics
    first_free = min(r["chunk_due_ns"][-1] for r in rows[:3])  # KV freed at this step's end
    # admitted then; its first token one step later: 40 ms + 4 prompt tokens at 20k tokens/s
    assert rows[3]["chunk_due_ns"][0] == first_free + 40_200_000
    assert rows[3]["chunk_due_ns"][0] - rows[3]["request_ns"] > 500_000_000  # it waited
    assert big.status_code == 400 and "KV capacity" in big.json()["error"]["message"]
    # the server's own histograms: four admissions, one of them after a wait of over 0.5 s
    hist = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in after.splitlines()
        if line.startswith("peakload_sim:request_queue_time_seconds")
        or line.startswith("peakload_sim:time_to_first_token_seconds")
    }
    assert hist["peakload_sim:request_queue_time_seconds_count"] == 4
    assert hist['peakload_sim:request_queue_time_seconds_bucket{le="0.25"}'] == 3
    assert hist["peakload_sim:request_queue_time_seconds_sum"] > 0.5
    assert hist["peakload_sim:time_to_first_token_seconds_count"] == 4
    assert hist['peakload_sim:time_to_first_token_seconds_bucket{le="+Inf"}'] == 4
