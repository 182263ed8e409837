"""Generator overhead and accuracy against the simulated engine's truth log (issue 2 benchmark).

For each concurrency level and each tool (peakload on asyncio, peakload on uvloop, Locust
FastHttpUser), a fresh sim (`loadgen.sim --preset fixed`, TTFT 50 ms, ITL 10 ms, pinned to core 1)
is driven by ONE fresh client process pinned to core 0: peakload through the real runner path
(`run_shard` + `OpenAITarget`, warm connections) or `locust -f bench/peer_locustfile.py`. Both log
per-request send and per-token arrival stamps (perf_counter_ns = CLOCK_MONOTONIC, the sim's clock)
and the sim logs when it wrote every token; the parent joins them by `x-peakload-request-id`.

    .venv/bin/python bench/generator_accuracy.py [--levels 1,16,64,256,1024] [--duration 8]

The first `--warmup` seconds of every run are excluded equally for both tools. Metrics over the
requests sent in [start + warmup, + duration): TTFT error = (first token - send) measured minus
(first token written - request received) true; ITL error per token k >= 1 = measured gap minus
true gap, where the tokens of one read (client) or one write (sim) share its time.
Tokens whose sim write call took over 0.5 ms (the sim preempted: its stamp is unsure) are left
out of both tools' errors and counted (`tokens_truth_uncertain`).
TTFT error splits into the client's first-token stamp minus the sim's write of it, plus the
sim's request stamp minus the client's send: transit and how late the sim's own loop read the
request (the truth's reference point, not the client's error).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from array import array
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.sim.truth import read_truth  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

TTFT_MS, ITL_MS, OUTPUT_TOKENS, PROMPT_WORDS = 50.0, 10.0, 128, 64
TOOLS = ("peakload", "peakload-uvloop", "locust")
TRUTH_SLACK_US = 500  # a sim write call longer than this leaves its token's true time unsure
RUN_ID = "00000000-0000-0000-0000-00000000b002"
CLIENT_CORE, SIM_CORE = "0", "1"
TAIL_S = 2.5  # locust keeps running this long after the window so window requests complete
_started: list[subprocess.Popen[bytes]] = []  # every process this script started


# ------------------------------------------------------------------ child: one peakload run


class CompactSink:
    """Keeps what the comparison needs in flat arrays (~6 bytes per chunk), not records.

    Like the store's writer, `write` only queues the batch; a thread does the conversion, so
    the bench's own bookkeeping does not hold up the event loop it is measuring."""

    def __init__(self) -> None:
        self.index, self.ok, self.nchunks = array("i"), array("b"), array("i")
        self.sched_wall, self.sent, self.first = array("q"), array("q"), array("q")
        self.offs, self.toks = array("i"), array("h")
        self.ticks: list[tuple[float, int, int]] = []  # (cpu %, rss bytes, in flight)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._convert, name="bench-sink", daemon=True)
        self._thread.start()

    def write(self, batch: Any) -> None:
        self._queue.put(batch)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def backlog(self) -> int:
        """Batches handed over but not yet converted (records still held as objects)."""
        return self._queue.qsize()

    def _convert(self) -> None:
        while (batch := self._queue.get()) is not None:
            self._keep(batch)

    def _keep(self, batch: Any) -> None:
        for r in batch.records:
            self.index.append(r.index)
            self.ok.append(1 if r.outcome.value == "ok" else 0)
            self.sched_wall.append(r.scheduled_at_ns)
            self.sent.append(-1 if r.sent_ns is None else r.sent_ns)
            self.first.append(-1 if r.first_token_ns is None else r.first_token_ns)
            self.nchunks.append(len(r.chunk_offsets_us))
            self.offs.extend(r.chunk_offsets_us)
            self.toks.extend(r.chunk_tokens)
        self.ticks.extend((t.cpu_percent, t.rss_bytes, t.in_flight) for t in batch.ticks)

    def nbytes(self) -> int:
        arrs = (self.index, self.ok, self.nchunks, self.sched_wall, self.sent, self.first)
        return sum(a.itemsize * len(a) for a in (*arrs, self.offs, self.toks))


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _runq_wait_ns() -> int:
    """ns this process's main thread spent runnable but waiting for a CPU (other tenants)."""
    with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
        return int(fh.read().split()[1])


def child(args: argparse.Namespace) -> None:
    """Run one shard of `args.streams` closed-loop streams; write stamps + health to args.out."""
    import asyncio

    from loadgen.engine.plan import ShardPlan
    from loadgen.engine.runner import run_shard
    from loadgen.engine.runtime import run_measurement
    from loadgen.runspec.spec import spec_from_dict
    from loadgen.targets import OpenAITarget

    n, warmup, duration = args.streams, args.warmup, args.duration
    spec = spec_from_dict(
        {
            "name": "generator-accuracy",
            "target": {"api": "openai-chat", "base_url": args.url + "/v1", "model": "m"},
            "workload": {"prompt_tokens": PROMPT_WORDS, "output_tokens": OUTPUT_TOKENS},
            "load": {"concurrency": [n], "duration_s": warmup + duration, "warmup_s": warmup},
        }
    )
    plan = ShardPlan(RUN_ID, "bench-0", "local", 0, 1.0, 5, [n], 10_000_000, spec.public_dict())
    sink = CompactSink()
    meta: dict[str, Any] = {"rss_before_warm_kib": _status_kib("VmRSS")}

    async def window(start: int) -> None:
        await asyncio.sleep(max(0, start + int(warmup * 1e9) - time.perf_counter_ns()) / 1e9)
        meta["cpu0_ns"], meta["w0_ns"] = time.process_time_ns(), time.perf_counter_ns()
        meta["runq0_ns"] = _runq_wait_ns()
        await asyncio.sleep(duration)
        meta["cpu1_ns"], meta["w1_ns"] = time.process_time_ns(), time.perf_counter_ns()
        meta["runq1_ns"] = _runq_wait_ns()
        meta["hwm_kib_at_window_end"] = _status_kib("VmHWM")
        meta["stamp_bytes_at_window_end"] = sink.nbytes()
        meta["sink_backlog_batches_at_window_end"] = sink.backlog()

    async def main() -> Any:
        meta["loop"] = type(asyncio.get_running_loop()).__module__
        target = OpenAITarget(spec.target, max_connections=n + 8)
        try:
            await target.warm(n)
            meta["rss_after_warm_kib"] = _status_kib("VmRSS")
            start = time.perf_counter_ns() + 300_000_000
            meta["start_ns"] = start
            w = asyncio.create_task(window(start))
            deadline = start + int((warmup + duration + 30) * 1e9)
            res = await run_shard(
                plan, target, sink, start_at_mono_ns=start, deadline_mono_ns=deadline
            )
            await w
            return res
        finally:
            await target.aclose()

    res = run_measurement(main())
    sink.close()
    meta.update(
        hwm_kib=_status_kib("VmHWM"),
        stamp_bytes=sink.nbytes(),
        valid=res.valid,
        invalid_reasons=res.invalid_reasons,
        health=res.health,
        outcomes=res.outcomes,
        status=res.status,
        started_wall_ns=res.started_wall_ns,
        ticks=sink.ticks,
    )
    arrays: dict[str, Any] = {
        k: np.frombuffer(getattr(sink, k), dtype=t) for k, t in _SINK_DTYPES.items()
    }
    np.savez(args.out, meta=np.array(json.dumps(meta)), **arrays)


_SINK_DTYPES = {
    "index": np.int32,
    "ok": np.int8,
    "nchunks": np.int32,
    "sched_wall": np.int64,
    "sent": np.int64,
    "first": np.int64,
    "offs": np.int32,
    "toks": np.int16,
}


# ------------------------------------------------------------------ parent: processes


def _spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)  # fmt: skip
    _started.append(p)
    return p


def _stop(p: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGTERM then SIGKILL the process group of `p` (a process this script started)."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _wait_healthy(port: int, p: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"sim exited with {p.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"sim on port {port} not healthy within 20 s")


def run_one(tool: str, streams: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Fresh sim + one client process; returns the level's metrics."""
    port = free_port()
    tag = f"{tool}-{streams}"
    truth, out = work / f"truth-{tag}.jsonl", work / f"client-{tag}.npz"
    sim_cmd = ["taskset", "-c", SIM_CORE, sys.executable, "-m", "loadgen.sim", "--preset",
               "fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--port", str(port),
               "--truth-log", str(truth)]  # fmt: skip
    sim = _spawn(sim_cmd, work / f"sim-{tag}.log")
    try:
        _wait_healthy(port, sim, work / f"sim-{tag}.log")
        url = f"http://127.0.0.1:{port}"
        env = dict(os.environ)
        if tool == "locust":
            env.update(PEAKLOAD_PEER_OUT=str(out), PEAKLOAD_PEER_WARMUP_S=str(args.warmup),
                       PEAKLOAD_PEER_MEASURE_S=str(args.duration),
                       PEAKLOAD_PEER_PROMPT_WORDS=str(PROMPT_WORDS),
                       PEAKLOAD_PEER_MAX_TOKENS=str(OUTPUT_TOKENS))  # fmt: skip
            run_time = int(np.ceil(args.warmup + args.duration + TAIL_S))
            cmd = ["taskset", "-c", CLIENT_CORE, str(Path(sys.executable).parent / "locust"),
                   "-f", str(ROOT / "bench" / "peer_locustfile.py"), "--headless",
                   "-u", str(streams), "-r", str(streams), "--run-time", f"{run_time}s",
                   "--host", url, "--only-summary", "--loglevel", "WARNING"]  # fmt: skip
        else:
            env["PEAKLOAD_LOOP"] = "uvloop" if tool == "peakload-uvloop" else "asyncio"
            cmd = ["taskset", "-c", CLIENT_CORE, sys.executable, str(Path(__file__).resolve()),
                   "--child", "--streams", str(streams), "--duration", str(args.duration),
                   "--warmup", str(args.warmup), "--url", url, "--out", str(out)]  # fmt: skip
        client = _spawn(cmd, work / f"client-{tag}.log", env)
        try:
            rc = client.wait(timeout=args.warmup + args.duration + 90)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{tag}: client did not finish in time") from None
        finally:
            _stop(client, 10)
        if rc != 0 or not out.exists():
            raise RuntimeError(
                f"{tag}: client exited {rc}: {(work / f'client-{tag}.log').read_text()[-3000:]}"
            )
    finally:
        _stop(sim, 60)
    row = analyse(tool, streams, out, truth, args)
    if not args.workdir:
        truth.unlink(missing_ok=True)
    return row


# ------------------------------------------------------------------ parent: analysis


def _client_requests(
    tool: str, out: Path
) -> tuple[dict[str, Any], list[tuple[str, int, np.ndarray, bool]]]:
    """(meta, [(request id, send ns, per-token arrival ns, ok)]) on the monotonic clock."""
    with np.load(out) as npz:  # an NpzFile re-reads an array on every d[key]: load each once
        d = {k: npz[k] for k in npz.files}
    meta: dict[str, Any] = json.loads(str(d["meta"]))
    reqs: list[tuple[str, int, np.ndarray, bool]] = []
    if tool == "locust":
        bounds = np.concatenate([[0], np.cumsum(d["lens"])])
        for i, (n, sent, ok) in enumerate(zip(d["ids"], d["sent"], d["ok"], strict=True)):
            rid = f"locust-{meta['pid']}-{n}"
            stamps = d["stamps"][bounds[i] : bounds[i + 1]].copy()  # not a view of all stamps
            reqs.append((rid, int(sent), stamps, bool(ok)))
        return meta, reqs
    from loadgen.results.records import make_request_id

    bounds = np.concatenate([[0], np.cumsum(d["nchunks"])])
    offs, toks = d["offs"].astype(np.int64) * 1000, d["toks"]
    for i, idx in enumerate(d["index"]):
        if d["sent"][i] < 0:
            continue
        sched = meta["start_ns"] + int(d["sched_wall"][i]) - meta["started_wall_ns"]
        sent = sched + int(d["sent"][i])
        sl = slice(bounds[i], bounds[i + 1])
        times = np.repeat(sent + offs[sl], toks[sl])
        reqs.append((make_request_id(RUN_ID, "bench-0", int(idx)), sent, times, bool(d["ok"][i])))
    return meta, reqs


def _pcts(x: np.ndarray) -> dict[str, float | None]:
    if not len(x):
        return {"p50": None, "p99": None, "abs_p50": None, "abs_p99": None, "n": 0}
    a = np.abs(x)
    return {"p50": float(np.percentile(x, 50)), "p99": float(np.percentile(x, 99)),
            "abs_p50": float(np.percentile(a, 50)), "abs_p99": float(np.percentile(a, 99)),
            "n": len(x)}  # fmt: skip


def analyse(
    tool: str, streams: int, out: Path, truth_path: Path, args: argparse.Namespace
) -> dict[str, Any]:
    meta, reqs = _client_requests(tool, out)
    rows, _ = read_truth(truth_path)
    truth = {r["request_id"]: r for r in rows if r.get("type", "request") == "request"}
    w0 = meta["start_ns"] + int(args.warmup * 1e9)
    w1 = w0 + int(args.duration * 1e9)
    ttft_err: list[float] = []
    first_err: list[float] = []  # first token: client stamp - sim write (the client's part)
    req_read: list[float] = []  # sim's request stamp - client send (transit + the sim's lag)
    itl_err: list[np.ndarray] = []
    late: list[np.ndarray] = []
    tokens_in_window = used = mismatched = failed = uncertain = 0
    for rid, sent, times, ok in reqs:
        tokens_in_window += int(np.count_nonzero((times >= w0) & (times < w1)))
        if not (w0 <= sent < w1):
            continue
        t = truth.get(rid)
        if not ok or t is None or t["outcome"] != "ok":
            failed += 1
            continue
        true = np.repeat(np.asarray(t["chunk_ns"], dtype=np.int64), t["chunk_tokens"])
        if len(true) != len(times) or not len(times):
            mismatched += 1
            continue
        used += 1
        # the sim's write stamps are only as exact as its write calls were short (a preempted
        # sim stamps late): tokens whose write took over TRUTH_SLACK_US are left out, and counted
        sure = np.repeat(
            np.asarray(t.get("chunk_write_us") or [0] * len(t["chunk_ns"])) <= TRUTH_SLACK_US,
            t["chunk_tokens"],
        )
        uncertain += int(np.count_nonzero(~sure))
        if sure[0]:
            ttft_err.append(((times[0] - sent) - (true[0] - t["request_ns"])) / 1e6)
            first_err.append((times[0] - true[0]) / 1e6)
            req_read.append((t["request_ns"] - sent) / 1e6)
        both = sure[1:] & sure[:-1]
        itl_err.append(((np.diff(times) - np.diff(true)) / 1e6)[both])
        late.append(np.asarray(t["chunk_late_us"], dtype=np.float64) / 1e3)
    ttft, itl = (
        _pcts(np.asarray(ttft_err)),
        _pcts(np.concatenate(itl_err) if itl_err else np.array([])),
    )
    theo = streams * OUTPUT_TOKENS / ((TTFT_MS + (OUTPUT_TOKENS - 1) * ITL_MS) / 1e3)
    hwm, base = (
        meta.get("hwm_kib_at_window_end", meta["hwm_kib"]),
        meta.get("rss_before_warm_kib", meta.get("rss_start_kib", 0)),
    )
    runq = None
    if "runq1_ns" in meta:
        runq = 100.0 * (meta["runq1_ns"] - meta["runq0_ns"]) / (meta["w1_ns"] - meta["w0_ns"])
    stamp = meta.get("stamp_bytes_at_window_end", meta.get("stamp_bytes", 0))
    cpu = None
    if "cpu1_ns" in meta:
        cpu = 100.0 * (meta["cpu1_ns"] - meta["cpu0_ns"]) / (meta["w1_ns"] - meta["w0_ns"])
    accurate = (ttft["abs_p50"] is not None and ttft["abs_p50"] < 1.0 and ttft["abs_p99"] < 2.0  # type: ignore[operator]
                and itl["abs_p99"] is not None and itl["abs_p99"] < 1.0)  # fmt: skip
    return {
        "tool": tool, "streams": streams, "requests_used": used, "requests_failed": failed,
        "requests_count_mismatch": mismatched, "tokens_per_s": tokens_in_window / args.duration,
        "theoretical_tokens_per_s": theo, "ttft_err_ms": ttft, "itl_err_ms": itl,
        "first_token_stamp_err_ms": _pcts(np.asarray(first_err)),
        "tokens_truth_uncertain": uncertain,
        "sim_request_read_after_send_ms": _pcts(np.asarray(req_read)),
        "sim_write_late_ms_p99": float(np.percentile(np.concatenate(late), 99)) if late else None,
        "cpu_percent": cpu, "runqueue_wait_percent": runq,
        "peak_rss_mib": hwm / 1024, "rss_base_mib": base / 1024,
        "rss_per_stream_kib": (hwm - base) / streams,
        "rss_per_stream_net_kib": (hwm - base - stamp / 1024) / streams,
        "bench_stamp_bytes": stamp,
        "bench_sink_backlog_batches": meta.get("sink_backlog_batches_at_window_end"),
        "valid": meta.get("valid"), "invalid_reasons": meta.get("invalid_reasons", []),
        "health": meta.get("health", {}), "loop": meta.get("loop"), "accurate": accurate,
    }  # fmt: skip


# ------------------------------------------------------------------ report


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "—" if v is None else format(v, fmt)


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| tool | streams | requests | tok/s (of theory) | TTFT err p50 / p99 ms "
            "| abs TTFT err p50 / p99 | ITL err p50 / p99 ms | abs ITL err p50 / p99 "
            "| 1st-token stamp abs err p99 / sim read after send p99 ms "
            "| CPU % (runq wait %) | peak RSS MiB | KiB/stream (net) | self-check | accurate |\n"
            + "|---" * 14 + "|\n")  # fmt: skip
    lines = []
    for r in rows:
        t, i = r["ttft_err_ms"], r["itl_err_ms"]
        f1 = r.get("first_token_stamp_err_ms", {})
        rr = r.get("sim_request_read_after_send_ms", {})
        check = "—" if r["valid"] is None else ("valid" if r["valid"] else "INVALID")
        lines.append(
            f"| {r['tool']} | {r['streams']} | {r['requests_used']} | {r['tokens_per_s']:.0f} "
            f"({100 * r['tokens_per_s'] / r['theoretical_tokens_per_s']:.0f}%) "
            f"| {_f(t['p50'])} / {_f(t['p99'])} | {_f(t['abs_p50'])} / {_f(t['abs_p99'])} "
            f"| {_f(i['p50'])} / {_f(i['p99'])} | {_f(i['abs_p50'])} / {_f(i['abs_p99'])} "
            f"| {_f(f1.get('abs_p99'))} / {_f(rr.get('p99'))} "
            f"| {_f(r['cpu_percent'], '.0f')} ({_f(r['runqueue_wait_percent'], '.0f')}) "
            f"| {r['peak_rss_mib']:.0f} "
            f"| {r['rss_per_stream_kib']:.1f} ({r['rss_per_stream_net_kib']:.1f}) | {check} "
            f"| {'yes' if r['accurate'] else 'no'} |"
        )
    return head + "\n".join(lines)


def summarise(rows: list[dict[str, Any]], tools: list[str]) -> dict[str, dict[str, Any]]:
    """Per tool: the highest level accurate with every lower level accurate too, the first
    level its self-check marked invalid, and RSS per stream between consecutive levels."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        mine = sorted((r for r in rows if r["tool"] == tool), key=lambda r: r["streams"])
        accurate_to = None
        for r in mine:
            if not r["accurate"]:
                break
            accurate_to = r["streams"]
        invalid = next((r["streams"] for r in mine if r["valid"] is False), None)
        marginal = {
            f"{a['streams']}->{b['streams']}": round(
                (b["peak_rss_mib"] - a["peak_rss_mib"]) * 1024 / (b["streams"] - a["streams"]), 1
            )
            for a, b in itertools.pairwise(mine)
        }
        out[tool] = {
            "accurate_up_to_streams": accurate_to,
            "first_invalid_streams": invalid,
            "marginal_rss_kib_per_stream": marginal,
        }
    return out


def parent(args: argparse.Namespace) -> None:
    levels = [int(x) for x in args.levels.split(",")]
    tools = args.tools.split(",")
    for t in tools:
        if t not in TOOLS:
            raise SystemExit(f"--tools: unknown tool {t!r} (known: {', '.join(TOOLS)})")
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    env = {"date_utc": stamp, "nproc": os.cpu_count(), "loadavg_before": os.getloadavg(),
           "levels": levels, "duration_s": args.duration, "warmup_s": args.warmup}  # fmt: skip
    print(f"# generator accuracy {stamp}  load average {env['loadavg_before']}", flush=True)
    rows: list[dict[str, Any]] = []
    path = out_dir / f"generator_accuracy-{stamp}.json"
    with contextlib.ExitStack() as stack:
        if args.workdir:
            work = Path(args.workdir)
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="peakload-ga-")))
        for n in levels:
            for tool in tools:
                row = run_one(tool, n, args, work)
                row["loadavg_after"] = os.getloadavg()
                rows.append(row)
                path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))  # so far
                print(table([row]).splitlines()[-1], flush=True)
    env["loadavg_after"] = os.getloadavg()
    summary = summarise(rows, tools)
    path.write_text(json.dumps({"env": env, "summary": summary, "rows": rows}, indent=1))
    print("\n" + table(rows) + "\n")
    for r in rows:
        if r["valid"] is False:
            print(f"- {r['tool']} {r['streams']}: invalid: {'; '.join(r['invalid_reasons'])}")
    for tool, s in summary.items():
        print(f"- {tool}: {s}")
    print(f"\nraw numbers: {path}  load average after {env['loadavg_after']}")


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--levels", default="1,16,64,256,1024", help="concurrent streams, comma-separated"
    )
    ap.add_argument("--duration", type=float, default=8.0, help="measured seconds per run")
    ap.add_argument(
        "--warmup", type=float, default=1.0, help="seconds excluded at each run's start"
    )
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"subset of {','.join(TOOLS)}")
    ap.add_argument("--workdir", default=None, help="keep truth logs and client files here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--streams", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.duration <= 0 or args.warmup < 0:
        raise SystemExit("--duration must be > 0 and --warmup >= 0 (seconds)")
    if args.child:
        child(args)
        return
    signal.signal(signal.SIGTERM, _terminate)
    try:
        parent(args)
    finally:
        for p in _started:
            _stop(p, 10)


if __name__ == "__main__":
    main()
