"""A shard's dispatch delay with each timer: how long after its scheduled instant a request of an
open loop starts (the runner's fold) and is written to the socket (`sent_ns`).

One `peakload sim` (`--preset fixed`, TTFT 20 ms, ITL 5 ms) on loopback; rounds alternate the
shard's timer between `timerfd` (loadgen.engine.timer.PreciseTimer, the shard's timer since
issue 28 item 4) and `asyncio.sleep` (loadgen.engine.timer.LoopSleep, the timer before it),
each round a fresh `run_shard` of a Poisson `--rate` for `--duration` seconds through the real
OpenAI target with warm connections, in this process.

    .venv/bin/python bench/dispatch_delay.py [--rate 6] [--duration 20] [--rounds 2]

Prints one JSON line per round: `sent_ns` p50 / p90 / p99 / max in ms over the requests sent
(from the records), and the self-check's dispatch delay p99 / max (from the fold's start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.engine import shard as shard_module  # noqa: E402
from loadgen.engine.plan import ShardPlan  # noqa: E402
from loadgen.engine.runner import run_shard  # noqa: E402
from loadgen.engine.runtime import run_measurement  # noqa: E402
from loadgen.engine.timer import LoopSleep, ShardTimer, shard_timer  # noqa: E402
from loadgen.results.records import Batch, RequestRecord  # noqa: E402
from loadgen.runspec.spec import spec_from_dict  # noqa: E402
from loadgen.targets.openai import OpenAITarget  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

RUN_ID = "00000000-0000-0000-0000-0000000000d1"
TIMERS: dict[str, Callable[[Callable[[], int]], ShardTimer]] = {
    "timerfd": shard_timer,
    "asyncio.sleep": LoopSleep,
}


class Records:
    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def write(self, batch: Batch) -> None:
        self.records.extend(batch.records)

    def close(self) -> None:
        pass


@contextlib.contextmanager
def sim() -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "loadgen.sim", "--port", str(port), "--preset", "fixed"]
    cmd += ["--ttft-ms", "20", "--itl-ms", "5"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(url + "/health", timeout=1).close()
                break
            time.sleep(0.05)
        else:
            raise SystemExit("dispatch_delay: the sim did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def one_round(url: str, timer: str, rate: float, duration: float, seed: int) -> dict[str, Any]:
    spec = spec_from_dict(
        {
            "name": "dispatch-delay",
            "target": {"api": "openai-chat", "base_url": url + "/v1", "model": "m"},
            "workload": {"prompt_tokens": 16, "output_tokens": 8},
            "load": {"rate": [rate], "arrival": "poisson", "duration_s": duration, "seed": seed},
        }
    )
    plan = ShardPlan(RUN_ID, "bench-0", "local", 0, 1.0, seed, [], 10_000_000, spec.public_dict())
    sink = Records()
    # the round's timer, where every shard of this process makes its own
    shard_module.shard_timer = TIMERS[timer]  # type: ignore[attr-defined,assignment]

    async def main() -> Any:
        target = OpenAITarget(spec.target, max_connections=16)
        try:
            await target.warm(4)
            start = time.perf_counter_ns() + 200_000_000
            return await run_shard(plan, target, sink, start_at_mono_ns=start)
        finally:
            await target.aclose()

    res = run_measurement(main())
    sent = np.array([r.sent_ns for r in sink.records if r.sent_ns is not None]) / 1e6
    p50, p90, p99 = np.percentile(sent, [50, 90, 99])
    return {
        "timer": timer,
        "requests_sent": int(sent.size),
        "sent_p50_ms": round(float(p50), 3),
        "sent_p90_ms": round(float(p90), 3),
        "sent_p99_ms": round(float(p99), 3),
        "sent_max_ms": round(float(sent.max()), 3),
        "dispatch_p99_ms": round(float(res.health["dispatch_delay_p99_ms"]), 3),
        "dispatch_max_ms": round(float(res.health["dispatch_delay_max_ms"]), 3),
        "valid": res.valid,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rate", type=float, default=6.0, help="requests per second (Poisson)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per timer, interleaved")
    args = ap.parse_args()
    print(json.dumps({"machine": platform.processor() or platform.machine()}))
    with sim() as url:
        for r in range(args.rounds):
            for timer in TIMERS:
                row = one_round(url, timer, args.rate, args.duration, seed=11 + r)
                print(json.dumps({"round": r, **row}), flush=True)


if __name__ == "__main__":
    main()
