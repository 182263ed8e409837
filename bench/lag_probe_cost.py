"""What the loop-lag probe costs a shard's process, and what it reads, by where its instants come
from: a periodic timerfd the loop watches (`timerfd`, today's default on Linux) or the thread
that writes each due time into a socket pair (`thread`, the peer: the probe before, and the
fallback elsewhere).

Every shard runs the probe for its whole life, an instant every 5 ms. A fleet on one host runs
many: 64 shards on 2 cores (tests/workers/distributed/test_fleet.py) are 64 probes. Per round
and source, `--processes` P processes each run the probe alone on an idle loop for
`--seconds` S, started together; the figures are the CPU they used in all (from the kernel's
accounting of the children: user + system), as a share of one core, and the probe's own
readings pooled over the P processes (lag p50 / p99 / max, ms). Sources alternate round by
round, so a drift of the host's speed falls on both.

    .venv/bin/python bench/lag_probe_cost.py [--processes 1 64] [--seconds 5] [--rounds 3]

Prints one JSON line per round, source and process count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import resource
import time
from typing import Any

import numpy as np

from loadgen.engine import lagprobe


def probe_alone(source: str, seconds: float, start_at: float, out: Any) -> None:
    """One process: the probe on an idle loop from `start_at` (wall) for `seconds`."""
    if source == "thread":
        lagprobe.PeriodicTimerFd.open = classmethod(lambda cls, *a: None)  # type: ignore[method-assign]

    async def main() -> list[float]:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        probe = lagprobe.LoopLagProbe(time.perf_counter_ns)
        task = asyncio.create_task(probe.run())
        await asyncio.sleep(seconds)
        task.cancel()
        return probe.second

    out.put(asyncio.run(main()))


def one_round(source: str, processes: int, seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start_at = time.time() + 1.0 + processes * 0.02  # every process forked and waiting first
    procs = [
        ctx.Process(target=probe_alone, args=(source, seconds, start_at, out))
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    samples: list[float] = []
    for _ in procs:
        samples.extend(out.get())
    for p in procs:
        p.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    arr = np.asarray(samples)
    return {
        "source": source,
        "processes": processes,
        "seconds": seconds,
        # the children's CPU over the probe's seconds (their import and fork are in it too: the
        # `idle` row, a process that only waits as long, is that floor)
        "cpu_s": round(cpu_s, 3),
        "cores_busy": round(cpu_s / seconds, 4),
        "samples": int(arr.size),
        "lag_p50_ms": round(float(np.percentile(arr, 50)), 3) if arr.size else None,
        "lag_p99_ms": round(float(np.percentile(arr, 99)), 3) if arr.size else None,
        "lag_max_ms": round(float(arr.max()), 3) if arr.size else None,
    }


def idle_alone(seconds: float, start_at: float, out: Any) -> None:
    time.sleep(max(0.0, start_at - time.time()) + seconds)
    out.put([])


def idle_round(processes: int, seconds: float) -> dict[str, Any]:
    """The floor: P forked processes that only wait as long."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start_at = time.time() + 1.0 + processes * 0.02
    procs = [
        ctx.Process(target=idle_alone, args=(seconds, start_at, out)) for _ in range(processes)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        out.get()
    for p in procs:
        p.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"source": "idle", "processes": processes, "seconds": seconds, "cpu_s": round(cpu_s, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(
        json.dumps({"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count()})
    )
    for r in range(args.rounds):
        for n in args.processes:
            order = ("timerfd", "thread") if r % 2 == 0 else ("thread", "timerfd")
            for source in order:
                print(json.dumps({"round": r, **one_round(source, n, args.seconds)}), flush=True)
            print(json.dumps({"round": r, **idle_round(n, args.seconds)}), flush=True)


if __name__ == "__main__":
    main()
