"""How many tokens/s the simulated engine keeps on schedule on one core.

Starts `python -m loadgen.sim` in fixed mode pinned to one CPU (`taskset -c`), drives it from this
process (pinned to another CPU) with N concurrent closed-loop streams over raw asyncio
connections (bytes counted, nothing parsed, so the client is not the bottleneck), and reads the
sim's truth log: achieved tokens/s over the steady window and lateness of every write (written
minus due, monotonic clock) p50/p99/max.

    .venv/bin/python bench/sim_capacity.py --streams 100 260 400 --itl-ms 10 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


class StreamClient(asyncio.Protocol):
    """One keep-alive connection sending the same streaming request again whenever one ends."""

    def __init__(self, request: bytes, stop: asyncio.Event) -> None:
        self.request = request
        self.stop = stop
        self.tail = b""
        self.done = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        tail = self.tail + data
        if tail.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of a chunked body
            self.done += 1
            self.tail = b""
            if not self.stop.is_set():
                self.t.write(self.request)  # type: ignore[attr-defined]
            return
        self.tail = tail[-64:]


def _request(port: int, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": "sim",
            "messages": [{"role": "user", "content": "one two three four"}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


async def _drive(
    port: int, streams: int, max_tokens: int, duration_s: float, spread_s: float
) -> tuple[int, int]:
    """Open `streams` connections at even absolute offsets over `spread_s` (one request's length,
    so the streams' token times interleave as with real users), keep them streaming
    `duration_s` after the last one opened, close them all. Returns (all open, stop) in
    perf_counter_ns."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    req = _request(port, max_tokens)
    transports = []
    t0 = time.perf_counter()
    for i in range(streams):
        await asyncio.sleep(max(0.0, t0 + i * spread_s / streams - time.perf_counter()))
        t, _ = await loop.create_connection(lambda: StreamClient(req, stop), "127.0.0.1", port)
        transports.append(t)
    ramped_ns = time.perf_counter_ns()
    await asyncio.sleep(duration_s)
    stop_ns = time.perf_counter_ns()
    stop.set()
    for t in transports:
        t.close()
    await asyncio.sleep(0.2)
    return ramped_ns, stop_ns


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of `pid` so far, all threads (from /proc)."""
    user = system = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        user += int(fields[11])  # utime, clock ticks
        system += int(fields[12])  # stime
    tick = os.sysconf("SC_CLK_TCK")
    return user / tick, system / tick


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_level(streams: int, args: argparse.Namespace) -> dict[str, float]:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        truth = Path(args.keep_truth or Path(tmp) / "truth.jsonl")
        nice = ["nice", "-n", str(args.nice)] if args.nice else []
        cmd = nice + [
            "taskset", "-c", str(args.server_cpu),
            sys.executable, "-m", "loadgen.sim", "--preset", "fixed",
            "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
            "--port", str(port), "--truth-log", str(truth),
        ] + (["--config", args.config] if args.config else [])  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # the URL: listening
            t_start = time.perf_counter_ns()
            per_request_s = (args.ttft_ms + (args.max_tokens - 1) * args.itl_ms) / 1000
            ramped_ns, stop_ns = _run(
                _drive(port, streams, args.max_tokens, args.duration, per_request_s)
            )
            t_end = time.perf_counter_ns()
            cpu_s = _cpu_seconds(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        lo = ramped_ns + int(args.warmup * 1e9)
        hi = stop_ns
        tokens = 0
        all_tokens = 0
        late: list[int] = []
        for line in truth.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") != "request":
                continue
            for t, n, lu in zip(
                rec["chunk_ns"], rec["chunk_tokens"], rec["chunk_late_us"], strict=True
            ):
                all_tokens += n
                if lo <= t < hi:
                    tokens += n
                    late.append(lu)
        per_request_ms = args.ttft_ms + (args.max_tokens - 1) * args.itl_ms
        arr = np.array(late or [0], dtype=np.float64) / 1000.0
        return {
            "streams": streams,
            "offered_tok_s": streams * args.max_tokens / (per_request_ms / 1000.0),
            "tok_s": tokens / ((hi - lo) / 1e9),
            "late_p50_ms": float(np.percentile(arr, 50)),
            "late_p99_ms": float(np.percentile(arr, 99)),
            "late_max_ms": float(arr.max()),
            "writes": len(late),
            "cpu_pct": 100.0 * sum(cpu_s) / ((t_end - t_start) / 1e9),
            "sys_pct": 100.0 * cpu_s[1] / ((t_end - t_start) / 1e9),
            "cpu_us_per_token": 1e6 * sum(cpu_s) / max(all_tokens, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[100, 260, 400])
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    ap.add_argument("--warmup", type=float, default=1.0, help="s left out after the ramp")
    ap.add_argument("--config", help="sim JSON config (e.g. timer_spin_us)")
    ap.add_argument("--keep-truth", help="write the truth log here (last level) and keep it")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument(
        "--nice", type=int, default=0, help="run the sim at this nice value (-10: shared hosts)"
    )
    ap.add_argument("--client-cpu", type=int, default=1)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.client_cpu})
    cols = [
        "streams",
        "offered tok/s",
        "achieved tok/s",
        "late p50 ms",
        "late p99 ms",
        "late max ms",
        "writes",
        "sim CPU % (sys)",
        "CPU µs/token",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---:|" * len(cols))
    for n in args.streams:
        r = run_level(n, args)
        print(
            f"| {n} | {r['offered_tok_s']:.0f} | {r['tok_s']:.0f} | {r['late_p50_ms']:.2f} "
            f"| {r['late_p99_ms']:.2f} | {r['late_max_ms']:.2f} | {r['writes']:.0f} "
            f"| {r['cpu_pct']:.0f} ({r['sys_pct']:.0f}) | {r['cpu_us_per_token']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
