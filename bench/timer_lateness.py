"""How late an asyncio task wakes for a due time: the floor under a shard's dispatch delay.

A shard's open loop sleeps until each request's scheduled instant (`Shard.sleep_until`:
`asyncio.sleep`). This measures, with nothing else on the loop, how late such a wake-up is
against its due time, for two ways of waiting, interleaved round by round on the same loop:

- `asyncio.sleep`: the loop's timer, as the shard waits today;
- `early-then-yield` (the peer): sleep until `--early-ms` before the due time, then yield
  (`asyncio.sleep(0)`) until it passes: exact, but the loop polls without blocking meanwhile;
- `timerfd`: the shard's timer since issue 28 item 4 (`loadgen.engine.timer.PreciseTimer`, a
  Linux timerfd read by the loop at the due time).

    .venv/bin/python bench/timer_lateness.py [--rate 6] [--count 120] [--rounds 3]

Prints one JSON line per round and way: lateness p50 / p90 / p99 / max in ms, and the CPU
seconds the process used while waiting that way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time

import numpy as np

from loadgen.engine.timer import PreciseTimer, ShardTimer, shard_timer


async def wait_sleep(due_ns: int, _early_ns: int) -> None:
    delay = due_ns - time.monotonic_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)


async def wait_early_then_yield(due_ns: int, early_ns: int) -> None:
    delay = due_ns - time.monotonic_ns() - early_ns
    if delay > 0:
        await asyncio.sleep(delay / 1e9)
    while time.monotonic_ns() < due_ns:
        await asyncio.sleep(0)


async def wait_timerfd(due_ns: int, _early_ns: int) -> None:
    await _TIMER[0].sleep_until(due_ns)


_TIMER: list[ShardTimer] = []  # the timerfd way's timer, on the running round's loop
WAYS = {
    "asyncio.sleep": wait_sleep,
    "early-then-yield": wait_early_then_yield,
    "timerfd": wait_timerfd,
}


async def measure(way: str, rate: float, count: int, early_ns: int) -> dict[str, float | str]:
    wait = WAYS[way]
    if way == "timerfd":
        timer = shard_timer(time.monotonic_ns)
        if not isinstance(timer, PreciseTimer):
            raise SystemExit("timer_lateness: no timerfd on this system")
        _TIMER[:] = [timer]
    gap_ns = int(1e9 / rate)
    start = time.monotonic_ns() + 20_000_000
    late_ms = np.empty(count)
    cpu0 = time.process_time()
    for i in range(count):
        due = start + i * gap_ns
        await wait(due, early_ns)
        late_ms[i] = (time.monotonic_ns() - due) / 1e6
    cpu_s = time.process_time() - cpu0
    for timer in _TIMER:
        timer.close()
    _TIMER.clear()
    p50, p90, p99 = np.percentile(late_ms, [50, 90, 99])
    return {
        "way": way,
        "rate_per_s": rate,
        "count": count,
        "late_p50_ms": round(float(p50), 3),
        "late_p90_ms": round(float(p90), 3),
        "late_p99_ms": round(float(p99), 3),
        "late_max_ms": round(float(late_ms.max()), 3),
        "cpu_s": round(cpu_s, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rate", type=float, default=6.0, help="due times per second")
    ap.add_argument("--count", type=int, default=120, help="due times per round and way")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--early-ms", type=float, default=1.5, help="the peer's early wake-up")
    args = ap.parse_args()
    print(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "python": platform.python_version(),
            }
        )
    )
    for r in range(args.rounds):
        for way in WAYS:
            row = asyncio.run(measure(way, args.rate, args.count, int(args.early_ms * 1e6)))
            print(json.dumps({"round": r, **row}), flush=True)


if __name__ == "__main__":
    main()
