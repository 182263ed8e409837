"""Benchmark: a distributed run on one machine. Three regions x two worker processes (prefork
`celery worker`s) against the simulated engine, each region through a TCP proxy adding its round
trip (2, 40, 120 ms): achieved vs configured load per region, start skew across workers, clock-
offset estimate error; then aggregate throughput from 1 to 6 worker processes.

    PEAKLOAD_BENCH_URL=postgresql://... python bench/distributed.py [--repeats 3] [--json F]

The URL is an admin URL of a PostgreSQL/TimescaleDB server (default: PEAKLOAD_TEST_TIMESCALE_URL);
a fresh database is made and dropped. Redis, the sim and the workers are started and stopped
here. On one host, Redis TIME is this host's wall clock, so the true offset is 0 and the
monotonic clock is shared by every process: skew and offset errors are measured exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.runspec.spec import RunSpec, spec_from_dict
from tests.support.celery_workers import (
    CeleryWorker,
    RedisServer,
    SimServer,
)
from tests.support.stores import FreshDatabase
from tests.support.tcpproxy import TcpProxy
from workers.app import make_app
from workers.coordinator import Coordinator, SubmitOptions

RTT_MS = {"near": 2.0, "mid": 40.0, "far": 120.0}


def spec(
    base_url: str, load: dict[str, Any], regions: list[tuple[str, float, int]], output_tokens: int
) -> RunSpec:
    return spec_from_dict(
        {
            "name": "bench-distributed",
            "target": {"api": "openai-chat", "base_url": base_url, "model": "sim"},
            "workload": {"prompt_tokens": 32, "output_tokens": output_tokens},
            "load": load,
            "regions": [{"name": n, "share": s, "workers": w} for n, s, w in regions],
        }
    )


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = min(len(v) - 1, max(0, round(p / 100 * (len(v) - 1))))
    return v[k]


def run_once(coord: Coordinator, s: RunSpec) -> tuple[str, str]:
    launch = coord.submit(s, SubmitOptions(ready_timeout_s=60, preflight=False))
    if not launch.started:
        raise SystemExit(f"start aborted: {launch.reason}")
    return launch.run_id, coord.wait(launch.run_id, timeout_s=300)


def regions_bench(
    coord: Coordinator, url: str, sim: SimServer, repeats: int, rate: float, duration_s: float
) -> dict[str, Any]:
    regions = [(r, 1 / 3, 2) for r in RTT_MS]
    s = spec(
        sim.base_url, {"rate": [rate], "arrival": "constant", "duration_s": duration_s}, regions, 16
    )
    per_region: dict[str, list[float]] = {r: [] for r in RTT_MS}
    starts: list[float] = []
    offset_err: list[float] = []
    uncert: list[float] = []
    statuses = []
    for _ in range(repeats):
        run_id, status = run_once(coord, s)
        statuses.append(status)
        with psycopg.connect(url, autocommit=True) as conn:
            true_mono = time.time_ns() - time.perf_counter_ns()  # wall - mono, this host
            start_ref = conn.execute(
                "SELECT start_at_ref_ns FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT region, start_skew_ns, (extra->>'start_mono_ns')::bigint, "
                "clock_offset_ns, clock_uncertainty_ns FROM shards WHERE run_id = %s",
                (run_id,),
            ).fetchall()
            for _region, skew, start_mono, off, unc in rows:
                # the instant the shard began, against the true coordinated instant (ms)
                true_start_mono = start_ref - true_mono
                starts.append((start_mono + skew - true_start_mono) / 1e6)
                offset_err.append(off / 1e6)  # true offset is 0: Redis TIME is this clock
                uncert.append(unc / 1e6)
            for region, n in conn.execute(
                "SELECT region, count(*) FROM requests WHERE run_id = %s AND phase = 'steady' "
                "AND outcome = 'ok' GROUP BY region",
                (run_id,),
            ).fetchall():
                per_region[region].append(n / duration_s)
    configured = rate / 3
    return {
        "statuses": statuses,
        "configured_req_s_per_region": configured,
        "achieved_req_s_per_region": {r: statistics.mean(v) for r, v in per_region.items()},
        "start_skew_ms": {
            "p50": pct([abs(x) for x in starts], 50),
            "p99": pct([abs(x) for x in starts], 99),
            "max": max(abs(x) for x in starts),
            "n": len(starts),
        },
        "clock_offset_error_ms": {
            "p50": pct([abs(x) for x in offset_err], 50),
            "max": max(abs(x) for x in offset_err),
        },
        "clock_uncertainty_ms": {"p50": pct(uncert, 50), "max": max(uncert)},
    }


def scaling_bench(
    coord: Coordinator,
    url: str,
    sim: SimServer,
    max_workers: int,
    users_per_worker: int,
    duration_s: float,
) -> list[dict[str, Any]]:
    out = []
    for n in range(1, max_workers + 1):
        s = spec(
            sim.base_url,
            {"concurrency": [users_per_worker * n], "duration_s": duration_s},
            [("scale", 1.0, n)],
            8,
        )
        run_id, status = run_once(coord, s)
        with psycopg.connect(url, autocommit=True) as conn:
            ok = conn.execute(
                "SELECT count(*) FROM requests WHERE run_id = %s AND outcome = 'ok' "
                "AND phase = 'steady'",
                (run_id,),
            ).fetchone()[0]
            valid, reasons = conn.execute(
                "SELECT valid, invalid_reasons FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
        out.append(
            {
                "workers": n,
                "status": status,
                "req_s": ok / duration_s,
                "valid": valid,
                "invalid_reasons": reasons,
            }
        )
        print(f"  {n} worker(s): {ok / duration_s:.1f} req/s ({status}, valid={valid})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rate", type=float, default=60.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--max-workers", type=int, default=6)
    ap.add_argument("--users-per-worker", type=int, default=16)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--skip-scaling", action="store_true")
    args = ap.parse_args()
    admin = os.environ.get("PEAKLOAD_BENCH_URL") or os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL")
    if not admin:
        raise SystemExit("set PEAKLOAD_BENCH_URL (or PEAKLOAD_TEST_TIMESCALE_URL)")
    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="peakload-bench-"))
    db = FreshDatabase(admin)
    redis_srv = RedisServer(tmp)
    sim = SimServer("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "2")
    host, port = "127.0.0.1", sim.port
    proxies = {r: TcpProxy(host, port, latency_ms=ms / 2).start() for r, ms in RTT_MS.items()}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PEAKLOAD_")},
        "PEAKLOAD_DATABASE_URL": db.url,
        "PEAKLOAD_REDIS_URL": redis_srv.url(0),
        "PEAKLOAD_ALLOW_PRIVATE_TARGETS": "1",
        "PEAKLOAD_LEASE_TTL_S": "15",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    os.environ["PEAKLOAD_ALLOW_PRIVATE_TARGETS"] = "1"
    workers: list[CeleryWorker] = []
    try:
        for region, proxy in proxies.items():
            for _i in range(2):
                workers.append(
                    CeleryWorker(
                        region,
                        env,
                        tmp,
                        index=len(workers),
                        extra_env={"PEAKLOAD_TARGET_OVERRIDE": f"http://127.0.0.1:{proxy.port}/v1"},
                    )
                )
        for _i in range(0 if args.skip_scaling else args.max_workers):
            workers.append(CeleryWorker("scale", env, tmp, index=len(workers)))
        for w in workers:
            w.wait_ready(90)
        coord = Coordinator(db.url, redis_srv.url(0), make_app(redis_srv.url(0)))
        print("regions: 3 x 2 workers", flush=True)
        reg = regions_bench(coord, db.url, sim, args.repeats, args.rate, args.duration)
        print(json.dumps(reg, indent=2), flush=True)
        print("scaling:", flush=True)
        scale = (
            []
            if args.skip_scaling
            else scaling_bench(
                coord, db.url, sim, args.max_workers, args.users_per_worker, args.duration
            )
        )
    finally:
        for w in workers:
            w.stop()
        for p in proxies.values():
            p.stop()
        sim.stop()
        redis_srv.stop()
        db.drop()
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    result = {
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "args": vars(args),
        "regions": reg,
        "scaling": scale,
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
