"""Benchmark: an hour-long soak. One `peakload run` (one measuring process) against the simulated
engine at a sustained open-loop load, into a fresh TimescaleDB database, for `--minutes`.

While it runs, every `--sample-s`: the resident memory (RSS, psutil) of every process of the run
(the `peakload run` process and any children) and of the sim; every `--db-sample-s`: the rows
stored so far and how far the newest stored request's scheduled time is behind the wall clock
(the store's lag as a reader of the run sees it: the request's own length, up to a second of the
runner's hand-off, the writer's 0.5-s batch and the commit), at random phases within
0.5-1.5 x `--db-sample-s`, because that lag is a sawtooth with a 1-s period. After it: the
run's exit code, status and validity, the ledger (requests scheduled against rows stored,
distinct request ids, failed rows), each process's RSS growth after the first `--settle-min`
minutes of the measurement (until the run row has its `ended_at`: the RSS of the summary
`peakload run` prints after it is reported apart, with its peak and how long it took,
sampled every second), and the analysis (`bench/analysis_load.py --run`) and Run page
(`bench/ui_render.py --run`) of the soak's own run.

    PEAKLOAD_BENCH_URL=postgresql://... python bench/soak.py --minutes 60 [--rate 250] [--json F]

The URL is an admin URL of the TimescaleDB server (default: PEAKLOAD_TEST_TIMESCALE_URL); the
fresh database is dropped at the end unless `--keep`. The sim runs pinned to CPU 0 and the run to
CPU 1 when the machine has two cores or more.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ui_render import cpu_model  # noqa: E402

from tests.support.celery_workers import SimServer  # noqa: E402
from tests.support.stores import FreshDatabase  # noqa: E402

PEAKLOAD = Path(sys.executable).with_name("peakload")


def spec_text(base_url: str, rate: float, duration_s: float, output_tokens: int) -> str:
    return f"""name = "soak"
labels = {{ bench = "soak" }}

[target]
api = "openai-chat"
base_url = "{base_url}"
model = "m"

[workload]
prompt_tokens = 128
output_tokens = {output_tokens}

[load]
rate = [{rate}]
arrival = "poisson"
duration_s = {duration_s}
max_concurrency = 1024
seed = 7
"""


def pinned(cmd: list[str], cpu: int | None) -> list[str]:
    return ["taskset", "-c", str(cpu), *cmd] if cpu is not None else cmd


def tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def label(p: psutil.Process, root_pid: int) -> str:
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return f"pid {p.pid}"
    if p.pid == root_pid:
        return "peakload run"
    tail = " ".join(c for c in cmd[1:4] if not c.startswith("/"))
    return f"child {p.pid}: {tail}"[:60]


def sample_rss(procs: dict[str, psutil.Process]) -> dict[str, int]:
    out = {}
    for name, p in procs.items():
        with contextlib.suppress(psutil.Error):
            out[name] = p.memory_info().rss
    return out


def sample_store(url: str) -> tuple[str | None, int, float | None, float | None, float | None]:
    """(run id, rows stored, seconds the newest stored request's scheduled time is behind now,
    median TTFT and E2E in ms, from the scheduled time, of the requests scheduled in the 10 s
    before the newest)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT run_id::text FROM runs LIMIT 1").fetchone()
        if row is None:
            return None, 0, None, None, None
        rid = row[0]
        got = conn.execute(
            "SELECT count(*), extract(epoch FROM now() - max(scheduled_at)), max(scheduled_at) "
            "FROM requests WHERE run_id = %s",
            (rid,),
        ).fetchone()
        assert got is not None
        if got[2] is None:
            return rid, int(got[0]), None, None, None
        recent = conn.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY first_token_ns) / 1e6, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY end_ns) / 1e6 FROM requests "
            "WHERE run_id = %s AND scheduled_at > %s::timestamptz - interval '10 s'",
            (rid, got[2]),
        ).fetchone()
    assert recent is not None
    return rid, int(got[0]), float(got[1]), recent[0], recent[1]


def run_ended_at(url: str) -> float | None:
    """When the run row got its `ended_at` (epoch s; the measurement is over and `peakload run`
    is loading the run back for its summary), None before."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT extract(epoch FROM ended_at) FROM runs LIMIT 1").fetchone()
    return float(row[0]) if row and row[0] is not None else None


def summary_phase(series: list[tuple[float, dict[str, int]]], ended_s: float | None) -> Any:
    """Per process the peak RSS after the measurement ended (the summary), and how long that
    phase lasted until the last sample."""
    if ended_s is None:
        return None
    after = [(t, s) for t, s in series if t >= ended_s]
    names = {n for _, s in after for n in s}
    return {
        "seconds": (after[-1][0] - ended_s) if after else 0.0,
        "rss_mib_peak": {n: max(s[n] for _, s in after if n in s) / 2**20 for n in sorted(names)},
    }


def ledger(url: str, rid: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        run = conn.execute(
            "SELECT status, valid, requests_scheduled, concat_ws('; ', status_reason, "
            "invalid_reasons::text), "
            "extract(epoch FROM ended_at - started_at) FROM runs WHERE run_id = %s",
            (rid,),
        ).fetchone()
        rows = conn.execute(
            "SELECT count(*), count(DISTINCT request_id), count(DISTINCT (shard_id, level, idx)), "
            "count(*) FILTER (WHERE outcome <> 'ok' AND outcome <> 'not_sent'), "
            "count(*) FILTER (WHERE outcome = 'not_sent'), sum(coalesce(output_tokens, 0)) "
            "FROM requests WHERE run_id = %s",
            (rid,),
        ).fetchone()
        blocks = conn.execute(
            "SELECT coalesce(sum(n_requests), 0), count(*) FROM request_blocks WHERE run_id = %s",
            (rid,),
        ).fetchone()
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert run is not None and rows is not None and blocks is not None and size is not None
    return {
        "status": run[0], "valid": run[1], "requests_scheduled": run[2], "error": run[3],
        "wall_s": float(run[4]) if run[4] is not None else None,
        "rows": rows[0], "distinct_request_ids": rows[1], "distinct_schedule_slots": rows[2],
        "failed_rows": rows[3], "not_sent_rows": rows[4], "output_tokens": int(rows[5] or 0),
        "requests_in_blocks": int(blocks[0]), "blocks": blocks[1],
        "database_bytes": size[0],
    }  # fmt: skip


def growth(series: list[tuple[float, dict[str, int]]], settle_s: float) -> dict[str, Any]:
    """Per process: RSS at the first sample after `settle_s`, the peak after it, the last, and
    the peak's growth over the settled value, in %."""
    out: dict[str, Any] = {}
    names = {n for _, s in series for n in s}
    for name in sorted(names):
        pts = [(t, s[name]) for t, s in series if name in s]
        after = [(t, v) for t, v in pts if t >= settle_s]
        if not after:
            continue
        base = after[0][1]
        peak = max(v for _, v in after)
        out[name] = {
            "rss_mib_first": pts[0][1] / 2**20,
            "rss_mib_at_settle": base / 2**20,
            "rss_mib_peak_after_settle": peak / 2**20,
            "rss_mib_last": after[-1][1] / 2**20,
            "rss_mib_peak_overall": max(v for _, v in pts) / 2**20,
            "growth_pct_after_settle": 100.0 * (peak - base) / base,
            "samples": len(pts),
        }
    return out


def after_run(script: str, url: str, rid: str, *extra: str) -> str:
    """Run a bench script on the soak's run; its output (the figures it prints)."""
    env = {**os.environ, "PEAKLOAD_BENCH_URL": url}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--run", rid, *extra],
        env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    return done.stdout + (
        f"\n[exit {done.returncode}]\n{done.stderr[-3000:]}" if done.returncode else ""
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=250.0, help="requests/s, Poisson")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--ttft-ms", type=float, default=30.0)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--db-sample-s", type=float, default=30.0)
    ap.add_argument("--settle-min", type=float, default=5.0)
    ap.add_argument("--keep", action="store_true", help="keep the database (its URL is printed)")
    ap.add_argument("--no-after", action="store_true", help="skip the analysis and UI timings")
    ap.add_argument("--json", help="write the report here too")
    args = ap.parse_args()
    admin = os.environ.get("PEAKLOAD_BENCH_URL") or os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL")
    if not admin:
        sys.exit("set PEAKLOAD_BENCH_URL (or PEAKLOAD_TEST_TIMESCALE_URL) to a server's admin URL")
    two = (os.cpu_count() or 1) >= 2
    work = Path(tempfile.mkdtemp(prefix="peakload-soak-"))
    db = FreshDatabase(admin)
    sim = SimServer("--preset", "fixed", "--ttft-ms", str(args.ttft_ms), "--itl-ms",
                    str(args.itl_ms))  # fmt: skip
    if two:
        subprocess.run(["taskset", "-pc", "0", str(sim.proc.pid)], capture_output=True, check=False)
    spec = work / "soak.toml"
    spec.write_text(spec_text(sim.base_url, args.rate, args.minutes * 60, args.output_tokens))
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": db.url, "PEAKLOAD_DATA_HOME": str(work / "home")}
    log = (work / "run.log").open("wb")
    t0 = time.monotonic()
    t0_epoch = time.time()  # the same instant on the wall clock: ended_at maps onto t
    end_soon = args.minutes * 60 - 30  # from here on, sampled every second
    run = subprocess.Popen(
        pinned([str(PEAKLOAD), "run", str(spec), "--processes", "1"], 1 if two else None),
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work,
    )  # fmt: skip
    root = psutil.Process(run.pid)
    sim_p = psutil.Process(sim.proc.pid)
    rss: list[tuple[float, dict[str, int]]] = []
    store: list[dict[str, Any]] = []
    rid: str | None = None
    next_db = 0.0
    jitter = random.Random(1)
    try:
        while run.poll() is None:
            t = time.monotonic() - t0
            procs = {label(p, run.pid): p for p in tree(root)}
            procs["sim"] = sim_p
            rss.append((t, sample_rss(procs)))
            if t >= next_db:
                # at random phases: the store's lag is a sawtooth (the runner hands off records
                # once a second), and samples at a fixed period walk along it (aliasing)
                next_db = t + args.db_sample_s * jitter.uniform(0.5, 1.5)
                try:
                    rid, rows, behind, ttft, e2e = sample_store(db.url)
                except psycopg.Error as exc:
                    print(f"{t:7.0f} s  store sample failed: {exc}", flush=True)
                else:
                    store.append(
                        {
                            "t_s": t,
                            "rows": rows,
                            "newest_behind_s": behind,
                            "recent_ttft_p50_ms": ttft,
                            "recent_e2e_p50_ms": e2e,
                        }
                    )
                    top = ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in rss[-1][1].items())
                    print(f"{t:7.0f} s  rows {rows:>9,}  newest {behind or 0:6.2f} s behind  "
                          f"ttft/e2e p50 {ttft or 0:.1f}/{e2e or 0:.1f} ms  {top}",
                          flush=True)  # fmt: skip
            # every second from shortly before the planned end: the summary may take seconds
            time.sleep(args.sample_s if t < end_soon else 1.0)
        code = run.returncode
        wall = time.monotonic() - t0
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(30)
        log.close()
        sim.stop()
    out_tail = (work / "run.log").read_text(errors="replace")[-4000:]
    if rid is None:
        rid = sample_store(db.url)[0]
    assert rid is not None, out_tail
    at = run_ended_at(db.url)  # read once, after the run: the row's stamp, not a sample's time
    ended_s = None if at is None else at - t0_epoch
    book = ledger(db.url, rid)
    steady = [s for s in store if s["t_s"] >= args.settle_min * 60 and s["newest_behind_s"]]
    lags = sorted(s["newest_behind_s"] for s in steady)
    report: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
        "load": {"rate": args.rate, "arrival": "poisson", "minutes": args.minutes,
                 "output_tokens": args.output_tokens, "prompt_tokens": 128,
                 "sim": f"fixed, TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms"},
        "exit_code": code, "bench_wall_s": wall, "run_id": rid, "ledger": book,
        "measurement_ended_s": ended_s,
        "rss": growth([x for x in rss if ended_s is None or x[0] < ended_s], args.settle_min * 60),
        "rss_summary_phase": summary_phase(rss, ended_s),
        "store_lag_after_settle_s": {
            "samples": len(lags), "min": lags[0] if lags else None,
            "median": lags[len(lags) // 2] if lags else None,
            "max": lags[-1] if lags else None,
        },
        "store_samples": store,
        "run_output_tail": out_tail[-1500:],
    }  # fmt: skip
    if not args.no_after:
        report["analysis"] = after_run("analysis_load.py", db.url, rid, "--summary")
        report["ui_run_page"] = after_run("ui_render.py", db.url, rid)
    print(json.dumps({k: v for k, v in report.items() if k != "store_samples"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "rss_series": rss}, indent=1))
    if args.keep:
        print(f"kept: {db.url}")
    else:
        db.drop_now()


if __name__ == "__main__":
    main()
