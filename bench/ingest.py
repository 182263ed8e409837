"""Ingest benchmark (D1): one StoreWriter into TimescaleDB, 128 chunks per request.

Measures sustained requests/s and token timestamps/s committed, and the lag from a record's end
(the moment the producer hands it to the writer, which is when a runner would) to the commit that
makes its row visible, on the monotonic clock. Runs in a fresh database that is dropped after.

    python bench/ingest.py --minutes 10                  # the full run (D1)
    python bench/ingest.py --minutes 2 --rate 25000      # open loop at a fixed offered rate
    python bench/ingest.py --minutes 1 --rate 0          # closed loop: the writer's ceiling
    python bench/ingest.py --minutes 1 --server-timings  # records as llama.cpp's (every column)

URL: --url, else PEAKLOAD_BENCH_DATABASE_URL, else PEAKLOAD_TEST_TIMESCALE_URL.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
import psycopg
from psycopg import sql

from loadgen.results.records import Batch, Outcome, RequestRecord, TokenSource
from workers.store.connect import ensure_schema, redact_url
from workers.store.features import detect
from workers.store.writer import StoreWriter, WriterConfig

CHUNKS = 128
HANDOFF = 1024  # records per write(): the runner's FLUSH_RECORDS


def make_batch(run_id: str, start: int, n: int, offsets: list[int], tokens: list[int],
               wall0_ns: int, server_timings: bool = False) -> Batch:  # fmt: skip
    """`server_timings`: every record also carries the server's own timings, as llama.cpp
    reports them, and every 10th a new connection's set-up time (the worst case for the
    encoder: every new column set)."""
    recs = []
    for i in range(start, start + n):
        timed = (
            {"server_prompt_tokens": 512, "server_prefill_ms": 31.25 + i % 7,
             "server_decode_tokens": CHUNKS, "server_decode_ms": 1254.5 + i % 13,
             "server_cached_tokens": 0, "connect_ns": 180_000 if i % 10 == 0 else None}
            if server_timings else {}
        )  # fmt: skip
        recs.append(RequestRecord(
            request_id=str(uuid.UUID(int=(i << 32) | 0xBEEF, version=4)), run_id=run_id,
            shard_id="bench-0", region="local", level=0, index=i,
            scheduled_at_ns=wall0_ns + i * 50_000, outcome=Outcome.OK, http_status=200,
            sent_ns=20_000, headers_ns=5_000_000, first_token_ns=40_000_000,
            first_answer_ns=40_000_000, end_ns=1_300_000_000, prompt_tokens=512,
            max_tokens=CHUNKS, output_tokens=CHUNKS, usage_completion_tokens=CHUNKS,
            client_tokens=CHUNKS, token_source=TokenSource.USAGE,
            chunk_offsets_us=offsets, chunk_tokens=tokens, **timed,
        ))  # fmt: skip
    return Batch(recs)


def run(url: str, minutes: float, rate: float, batch_rows: int, batch_s: float,
        server_timings: bool = False) -> dict[str, Any]:  # fmt: skip
    run_id = str(uuid.uuid4())
    offsets = [40_000 + 10_000 * k for k in range(CHUNKS)]
    tokens = [1] * CHUNKS
    config = WriterConfig(batch_max_rows=batch_rows, batch_max_s=batch_s,
                          spool_dir=f"/tmp/peakload-bench-spool/{run_id}")  # fmt: skip
    writer = StoreWriter(url, run_id, config)
    wall0 = time.time_ns()  # a wall anchor for scheduled_at only, never for a duration
    duration_ns = int(minutes * 60e9)
    intervals: list[tuple[float, int, float | None]] = []
    stop = threading.Event()

    def sample() -> None:
        last_rows, last_t = 0, time.perf_counter_ns()
        while not stop.wait(10):
            s, now = writer.stats(), time.perf_counter_ns()
            rate_s = (s.rows_inserted - last_rows) / ((now - last_t) / 1e9)
            intervals.append((rate_s, writer._rows_in - writer._rows_out, s.lag_max_s))
            print(f"  {len(intervals) * 10:4d} s  {rate_s:9.0f} req/s committed  "
                  f"backlog {intervals[-1][1]:7d}  lag p50 {s.lag_p50_s or 0:.3f} s",
                  flush=True)  # fmt: skip
            last_rows, last_t = s.rows_inserted, now

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter_ns()
    sent = 0
    while time.perf_counter_ns() - t0 < duration_ns:
        if rate > 0:
            due = sent / rate
            ahead = due - (time.perf_counter_ns() - t0) / 1e9
            if ahead > 0:
                time.sleep(ahead)
        else:  # closed loop: keep a bounded backlog so the writer's ceiling is what is measured
            while writer._rows_in - writer._rows_out > 4 * batch_rows:
                time.sleep(0.001)
        writer.write(make_batch(run_id, sent, HANDOFF, offsets, tokens, wall0, server_timings))
        sent += HANDOFF
    produce_s = (time.perf_counter_ns() - t0) / 1e9
    backend = _backend(url)  # the writer's server process: where the server-side time goes
    writer.close()
    total_s = (time.perf_counter_ns() - t0) / 1e9
    stop.set()
    me = psutil.Process().cpu_times()
    server_cpu = sum(backend.cpu_times()[:2]) if backend is not None else float("nan")
    s = writer.stats()
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM requests WHERE run_id = %s", (run_id,)).fetchone()
    rows = int(row[0]) if row else 0
    steady = [r for r, _, _ in intervals[1:]] or [s.rows_inserted / total_s]
    return {
        "offered_rate": rate, "records": sent, "rows_in_db": rows, "produce_s": produce_s,
        "total_s": total_s, "req_per_s_overall": rows / total_s,
        "req_per_s_interval_min": min(steady),
        "req_per_s_interval_median": statistics.median(steady),
        "token_ts_per_s_overall": rows * CHUNKS / total_s, "lag_p50_s": s.lag_p50_s,
        "lag_max_s": s.lag_max_s, "batches": s.batches_committed, "lost": s.records_lost,
        "spilled_to_spool": s.spooled_batches, "replayed": s.replayed_batches,
        "client_cpu_s": me.user + me.system, "server_backend_cpu_s": server_cpu,
        "client_cpu_us_per_req": (me.user + me.system) / max(rows, 1) * 1e6,
        "server_cpu_us_per_req": server_cpu / max(rows, 1) * 1e6,
    }  # fmt: skip


def _backend(url: str) -> psutil.Process | None:
    """The writer connection's backend process, when the server runs on this host."""
    try:
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'peakload-writer' "
                "AND datname = current_database()"
            ).fetchone()
        return psutil.Process(int(row[0])) if row else None
    except (psycopg.Error, psutil.Error):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("PEAKLOAD_BENCH_DATABASE_URL")
                    or os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL"))  # fmt: skip
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=25_000, help="offered req/s; 0 = closed loop")
    ap.add_argument("--batch-rows", type=int, default=10_000)
    ap.add_argument("--batch-s", type=float, default=0.5)
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    ap.add_argument("--server-timings", action="store_true",
                    help="records carry the server's own timings (as llama.cpp's)")  # fmt: skip
    args = ap.parse_args()
    if not args.url:
        sys.exit("no database: pass --url or set PEAKLOAD_TEST_TIMESCALE_URL")
    dbname = f"pl_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    base = psycopg.conninfo.conninfo_to_dict(args.url)
    url = psycopg.conninfo.make_conninfo(**{**base, "dbname": dbname})
    try:
        ensure_schema(url, force=True)
        with psycopg.connect(url, autocommit=True) as conn:
            f = detect(conn)
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
        cpu = names[0] if names else platform.processor()
        print(
            f"store {redact_url(args.url)} db {dbname}: PostgreSQL {f.server_version}, "
            f"timescaledb {f.timescaledb_version} ({f.license}); nproc {os.cpu_count()}, {cpu}"
        )
        res = run(url, args.minutes, args.rate, args.batch_rows, args.batch_s,
                  args.server_timings)  # fmt: skip
        for k, v in res.items():
            print(f"{k:28s} {v:,.3f}" if isinstance(v, float) else f"{k:28s} {v}")
    finally:
        if not args.keep:
            with psycopg.connect(args.url, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(dbname)))  # fmt: skip


if __name__ == "__main__":
    main()
