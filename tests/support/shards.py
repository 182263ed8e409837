"""Run one shard of a spec against a real endpoint (the simulated engine) in this process."""

from __future__ import annotations

import time
from typing import Any

from loadgen.engine.plan import ShardPlan
from loadgen.engine.runner import ShardResult, run_shard
from loadgen.engine.runtime import run_measurement
from loadgen.results.records import Batch, RequestRecord
from loadgen.runspec.spec import RunSpec, spec_from_dict
from loadgen.targets import TargetPolicy, build_target
from tests.support.memsink import MemorySink, ledger

RUN_ID = "00000000-0000-0000-0000-0000000000aa"


def make_spec(base_url: str, load: dict[str, Any], **rest: Any) -> RunSpec:
    target = {"api": "openai-chat", "base_url": base_url, "model": "m", **rest.pop("target", {})}
    workload = rest.pop("workload", {"prompt_tokens": 16, "output_tokens": 16})
    return spec_from_dict(
        {"name": "t", "target": target, "workload": workload, "load": load, **rest}
    )


def one_shard(spec: RunSpec, *, max_requests: int = 1_000_000) -> ShardPlan:
    return ShardPlan(
        run_id=RUN_ID,
        shard_id="local-0",
        region="local",
        slot=0,
        fraction=1.0,
        seed=5,
        users_per_level=list(spec.load.concurrency or []),
        max_requests=max_requests,
        spec=spec.public_dict(),
    )


class CountingSink:
    """Keeps only counts and the last few records: a sink whose memory cannot grow."""

    def __init__(self) -> None:
        self.records = 0
        self.rss: list[tuple[int, int]] = []  # (tick wall ns, rss bytes)
        self.last: list[RequestRecord] = []

    def write(self, batch: Batch) -> None:
        self.records += len(batch.records)
        self.rss.extend((t.t_ns, t.rss_bytes) for t in batch.ticks)
        self.last = batch.records[-4:] or self.last

    def close(self) -> None:
        return None


def run_spec(
    spec: RunSpec, *, sink: Any = None, warm: int | None = None, max_requests: int = 1_000_000
) -> tuple[ShardResult, Any]:
    """Run `spec` as one shard against its target; check the ledger when records are kept."""
    plan = one_shard(spec, max_requests=max_requests)
    sink = sink if sink is not None else MemorySink()
    n = warm if warm is not None else max(spec.load.concurrency or [16])
    target = build_target(
        spec.target,
        TargetPolicy().allowing_private(),  # the loopback engines of the tests
        max_connections=max(n, spec.load.max_concurrency if spec.load.rate else n) + 8,
    ).client

    async def main() -> ShardResult:
        try:
            await target.warm(n)
            start = time.perf_counter_ns() + 300_000_000
            # The wall anchor is the monotonic clock itself, so each record's `scheduled_at_ns`
            # is a monotonic time and its stamps compare directly with the engine's truth log.
            return await run_shard(
                plan, target, sink, start_at_mono_ns=start, wall_clock=time.perf_counter_ns
            )
        finally:
            await target.aclose()

    result = run_measurement(main())
    if isinstance(sink, MemorySink):
        ledger(sink.records, result.requests_scheduled)
    return result, sink
