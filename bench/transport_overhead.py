"""Per-chunk CPU cost of the target transports (raw asyncio vs httpx) at 1 and N streams.

A server process (pinned to the last core) streams small vLLM-shaped SSE chunks, one HTTP chunk
per event, to every open stream on a shared 1/rate tick; each event carries the server's
`perf_counter_ns()` at write time. The client process (pinned to core 0) runs closed-loop
streams through `OpenAITarget.stream()` doing the runner's per-chunk bookkeeping, and reports:
CPU µs per event and per network read (process CPU time / count, in the measured window), the
share of one core used, and the stamping delay = client stamp - server write time (same host,
same monotonic clock), p50/p99/max, in µs.

    .venv/bin/python bench/transport_overhead.py --streams 1,256 --transports raw,httpx
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest
from loadgen.targets import OpenAITarget
from tests.support.ports import free_port

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(t_ns: int) -> bytes:
    obj = {
        "id": "chatcmpl-5b1c0e3a9f2d4c7e8a6b",
        "object": "chat.completion.chunk",
        "created": 1764460800,
        "model": "bench-model",
        "choices": [
            {"index": 0, "delta": {"content": str(t_ns)}, "logprobs": None, "finish_reason": None}
        ],
    }
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


TAIL = (
    _chunk(
        b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":100}}\n\n'
        b"data: [DONE]\n\n"
    )
    + b"0\r\n\r\n"
)


async def serve(port: int, rate: float, events: int) -> None:
    """Stream `events` events per request to every open stream, all on one 1/rate tick."""
    active: dict[asyncio.StreamWriter, int] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                writer.write(HEAD)
                active[writer] = events
                while writer in active:
                    await asyncio.sleep(0.05)
        except (asyncio.IncompleteReadError, ConnectionError):
            active.pop(writer, None)
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    loop = asyncio.get_running_loop()
    tick = 1.0 / rate
    next_at = loop.time()
    async with server:
        while True:
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            for w in list(active):
                left = active[w] - 1
                if w.is_closing():
                    del active[w]
                    continue
                w.write(_event(time.perf_counter_ns()))
                if left:
                    active[w] = left
                else:
                    w.write(TAIL)
                    del active[w]


FLOOR_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}"
)


async def floor_client(
    port: int, streams: int, warmup_s: float, duration_s: float
) -> dict[str, float]:
    """The asyncio floor: a bare Protocol per stream that stamps and counts each read and sends
    the next request when a response ends — no HTTP parsing, no SSE, no JSON, no generators."""
    loop = asyncio.get_running_loop()
    clock = time.perf_counter_ns
    counts = {"events": 0, "reads": 0, "requests": 0, "errors": 0}
    state = {"measuring": False}

    class Floor(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            transport.write(FLOOR_REQUEST)  # type: ignore[attr-defined]

        def data_received(self, data: bytes) -> None:
            clock()
            if state["measuring"]:
                counts["reads"] += 1
                counts["events"] += data.count(b'"content"')
            if data.endswith(b"0\r\n\r\n"):
                counts["requests"] += state["measuring"]
                self.transport.write(FLOOR_REQUEST)  # type: ignore[attr-defined]

    conns = [await loop.create_connection(Floor, "127.0.0.1", port) for _ in range(streams)]
    await asyncio.sleep(warmup_s)
    state["measuring"] = True
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(duration_s)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    state["measuring"] = False
    for t, _ in conns:
        t.close()
    n = max(counts["events"], 1)
    return {
        **counts,
        "events_per_s": counts["events"] / wall,
        "cpu_share": cpu / wall,
        "us_per_event": cpu / n * 1e6,
        "us_per_read": cpu / max(counts["reads"], 1) * 1e6,
        "delay_p50_us": float("nan"),
        "delay_p99_us": float("nan"),
        "delay_max_us": float("nan"),
    }


async def client(
    port: int, transport: str, streams: int, warmup_s: float, duration_s: float
) -> dict[str, float]:
    if transport == "floor":
        return await floor_client(port, streams, warmup_s, duration_s)
    spec = TargetSpec(api="openai-chat", base_url=f"http://127.0.0.1:{port}/v1", model="m")
    target = OpenAITarget(spec, max_connections=streams, transport=transport)
    await target.warm(streams)
    clock = time.perf_counter_ns
    state = {"measuring": False, "stop": False}
    counts = {"events": 0, "reads": 0, "requests": 0, "errors": 0}
    delays: list[int] = []

    async def user(u: int) -> None:
        i = 0
        while not state["stop"]:
            req = PreparedRequest(
                request_id=f"u{u}-{i}",
                body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100},
                deadline_s=60,
                idle_timeout_s=10,
            )
            i += 1
            offsets: list[int] = []  # the runner's per-chunk work: offset and tokens
            tokens: list[int] = []
            sent = 0
            last_t = -1
            try:
                async for ev in target.stream(req, clock):
                    k = ev.kind
                    if k == EventKind.CONTENT:
                        offsets.append((ev.t_ns - sent) // 1000)
                        tokens.append(ev.tokens)
                        if state["measuring"]:
                            counts["events"] += 1
                            if ev.t_ns != last_t:
                                counts["reads"] += 1
                                last_t = ev.t_ns
                            if len(delays) < 2_000_000:
                                delays.append(ev.t_ns - int(ev.text))
                    elif k == EventKind.SENT:
                        sent = ev.t_ns
            except Exception:
                counts["errors"] += 1
                await asyncio.sleep(0.1)
            if state["measuring"]:
                counts["requests"] += 1

    tasks = [asyncio.create_task(user(u)) for u in range(streams)]
    await asyncio.sleep(warmup_s)
    state["measuring"] = True
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(duration_s)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    state["measuring"] = False
    state["stop"] = True
    await asyncio.gather(*tasks)
    await target.aclose()
    delays.sort()
    n = max(counts["events"], 1)

    def pct(p: float) -> float:
        return delays[min(len(delays) - 1, int(p * len(delays)))] / 1000 if delays else 0.0

    return {
        "events": counts["events"],
        "reads": counts["reads"],
        "requests": counts["requests"],
        "errors": counts["errors"],
        "events_per_s": counts["events"] / wall,
        "cpu_share": cpu / wall,
        "us_per_event": cpu / n * 1e6,
        "us_per_read": cpu / max(counts["reads"], 1) * 1e6,
        "delay_p50_us": pct(0.5),
        "delay_p99_us": pct(0.99),
        "delay_max_us": delays[-1] / 1000 if delays else 0.0,
    }


def parse_only(n: int = 200_000) -> dict[str, float]:
    """CPU µs per event of the raw path's parsing alone: chunked decode + SSE + JSON -> events,
    one event per read (the worst case), no sockets and no event loop."""
    from loadgen.targets.openai_stream import OpenAIStreamDecoder
    from loadgen.targets.rawhttp import _Chunked
    from loadgen.targets.sse import SSEParser

    reads = [_event(1_700_000_000_000_000_000 + i) for i in range(1000)]
    chunked, sse, dec = _Chunked(), SSEParser(), OpenAIStreamDecoder()
    out: list[object] = []
    t0 = time.process_time()
    for i in range(n):
        body, _ = chunked.feed(reads[i % 1000])
        for payload in sse.feed(body):
            dec.decode(payload, i, out)  # type: ignore[arg-type]
        out.clear()
    return {"us_per_event": (time.process_time() - t0) / n * 1e6}


def _pin(core: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, {core})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--streams", default="1,256")
    ap.add_argument("--transports", default="raw,httpx,floor", help="floor: bare asyncio reads")
    ap.add_argument("--loops", default="uvloop,asyncio")
    ap.add_argument("--rate", type=float, default=100.0, help="events/s per stream")
    ap.add_argument("--events", type=int, default=100, help="events per request")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--parse-only", action="store_true", help="time parsing alone and exit")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    args = ap.parse_args()
    ncpu = os.cpu_count() or 1
    if args.parse_only:
        _pin(0)
        cost = parse_only()["us_per_event"]
        print(f"parse only (chunked + SSE + JSON -> events): {cost:.2f} µs/event")
        return
    if args.serve:
        _pin(ncpu - 1)
        import uvloop

        uvloop.run(serve(args.serve, args.rate, args.events))
        return
    if args.client:
        transport, streams, loop_name, port = args.client.split(":")
        _pin(0)
        coro = client(int(port), transport, int(streams), args.warmup, args.duration)
        if loop_name == "uvloop":
            import uvloop

            result = uvloop.run(coro)
        else:
            result = asyncio.run(coro)
        print(json.dumps(result))
        return
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
         if ln.startswith("model name")), platform.processor(),
    )  # fmt: skip
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, nproc={ncpu}, CPU: {cpu}")
    print(f"# {args.rate:g} events/s per stream, {args.events} events per request")
    print(
        "| transport | loop | streams | events/s | CPU % of core | µs/event | µs/read "
        "| stamp delay p50 / p99 / max µs | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for streams in [int(s) for s in args.streams.split(",")]:
        for loop_name in args.loops.split(","):
            for transport in args.transports.split(","):
                port = free_port()
                base = [sys.executable, __file__, "--rate", str(args.rate)]
                base += ["--events", str(args.events)]
                srv = subprocess.Popen([*base, "--serve", str(port)])
                try:
                    time.sleep(0.7)
                    out = subprocess.run(
                        [*base, "--warmup", str(args.warmup), "--duration", str(args.duration),
                         "--client", f"{transport}:{streams}:{loop_name}:{port}"],
                        check=True, capture_output=True, text=True, timeout=300,
                    ).stdout  # fmt: skip
                finally:
                    srv.terminate()
                    srv.wait(10)
                r = json.loads(out.strip().splitlines()[-1])
                print(
                    f"| {transport} | {loop_name} | {streams} | {r['events_per_s']:.0f} | "
                    f"{100 * r['cpu_share']:.0f} | {r['us_per_event']:.1f} | "
                    f"{r['us_per_read']:.1f} | {r['delay_p50_us']:.0f} / "
                    f"{r['delay_p99_us']:.0f} / {r['delay_max_us']:.0f} | {r['errors']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
