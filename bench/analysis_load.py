"""Benchmark: load a stored run of N requests x C chunks and compute every percentile curve
(TTFT, TPOT, ITL per token, E2E; per level, pooled and per region; 95% bootstrap bands) and the
frontier. Prints timings (time.perf_counter_ns) and peak RSS.

    PEAKLOAD_BENCH_URL=postgresql://... python bench/analysis_load.py [--requests 1000000]

The URL is an admin URL of a PostgreSQL/TimescaleDB server (default: PEAKLOAD_TEST_TIMESCALE_URL);
the run is generated server-side once into the database `peakload_bench` and reused (or, with
`--run ID`, a stored run is read from the URL's own database, bench/soak.py's), and its
request_blocks are written once by workers.store.backfill (the writer's encoder, in the writer's
5,000-row batches), as a writer would have written them. `--arrays` reads the int[] columns
instead (analysis.store.fastload's fallback, the path of runs without blocks).

The passes: cold (read from the store, then compute), warm (the run's arrays from the local
cache, analysis.store.cache, computed again) and kept (the curves and frontier kept by
analysis.store.derived, written after the cold pass and not timed, as `run` keeps them at a
run's end): read from local files (a second report on the machine that computed them), then
from the store with an empty local cache (the first report of the run on another machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.reports.report import kept_curves, kept_frontier
from analysis.reports.summary import level_summary
from analysis.stats import frontier, percentiles
from analysis.store import buckets, cache, derived, fastload, load
from analysis.verdicts import max_load
from workers.store.backfill import pack_run

DB = "peakload_bench"
LEVELS = (50.0, 100.0, 200.0, 400.0)
REGIONS = ("eu-west", "us-east", "ap-south")
SQL_DIR = Path(__file__).resolve().parents[1] / "deploy" / "sql"
KEPT_LOCAL = "kept: curves + frontier read (connect, fingerprint, local files)"
KEPT_STORED = "kept: the same on another machine (connect, fingerprint, store)"


def run_id_for(n: int, chunks: int) -> str:
    return f"00000000-0000-0000-bbbb-{n:06d}{chunks:06d}"[:36]


def ensure_db(admin_url: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as c:
        if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,)).fetchone() is None:
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB)))
    url = psycopg.conninfo.make_conninfo(admin_url, dbname=DB)
    with psycopg.connect(url, autocommit=True) as c:
        for f in sorted(SQL_DIR.glob("*.sql")):
            c.execute(f.read_text())
    return url


def generate(conn: psycopg.Connection[tuple[object, ...]], rid: str, n: int, chunks: int) -> None:
    """Server-side: n requests over 4 rate levels and 3 regions; every 200th a 503 with no
    chunks; others `chunks` chunks, one token each except every 20th chunk (two)."""
    per_level = n // len(LEVELS)
    dur = per_level / LEVELS[0]
    conn.execute("DELETE FROM runs WHERE run_id = %s", (rid,))
    conn.execute("DELETE FROM requests WHERE run_id = %s", (rid,))
    conn.execute(
        "INSERT INTO runs (run_id, name, status, valid, api, target_url, model, labels, spec, "
        "started_at, ended_at, requests_scheduled) VALUES (%s, 'bench-analysis', 'completed', "
        "true, 'openai-chat', 'http://127.0.0.1:9/v1', 'bench', '{\"engine\": \"bench\"}', "
        '\'{"slos": [{"metric": "ttft_ms", "percentile": 99, "threshold": 800}]}\', '
        "'2026-11-01T00:00:00Z', '2026-11-01T00:00:00Z'::timestamptz + make_interval(secs => %s),"
        " %s)",
        (rid, dur * len(LEVELS), n),
    )
    for i, rate in enumerate(LEVELS):
        conn.execute(
            "INSERT INTO run_levels (run_id, level, kind, value, duration_s) "
            "VALUES (%s, %s, 'rate', %s, %s)",
            (rid, i, rate, dur),
        )
    step = 100_000
    for lo in range(0, n, step):
        t = time.perf_counter_ns()
        conn.execute(
            """
            INSERT INTO requests (request_id, scheduled_at, run_id, shard_id, region, level, idx,
                phase, outcome, http_status, token_source, sent_ns, first_token_ns,
                first_answer_ns, end_ns, prompt_tokens, output_tokens, client_tokens,
                usage_completion_tokens, chunk_offsets_us, chunk_tokens)
            SELECT gen_random_uuid(),
                   '2026-11-01T00:00:00Z'::timestamptz + make_interval(secs => g * %(dt)s),
                   %(rid)s, 'shard-' || (g %% 6), (%(regions)s::text[])[1 + g %% 3],
                   g / %(per)s, g, 'steady',
                   CASE WHEN g %% 200 = 199 THEN 'http_error' ELSE 'ok' END,
                   CASE WHEN g %% 200 = 199 THEN 503 END, 'usage', s.sent,
                   CASE WHEN g %% 200 = 199 THEN NULL ELSE s.sent + s.ttft * 1000 END,
                   CASE WHEN g %% 200 = 199 THEN NULL ELSE s.sent + s.ttft * 1000 END,
                   CASE WHEN g %% 200 = 199 THEN s.sent + 2000000
                        ELSE s.sent + a.offs[%(c)s::int]::int8 * 1000 END,
                   512, a.toks_sum, a.toks_sum, a.toks_sum,
                   CASE WHEN g %% 200 = 199 THEN '{}'::int[] ELSE a.offs END,
                   CASE WHEN g %% 200 = 199 THEN '{}'::smallint[] ELSE a.toks END
            FROM generate_series(%(lo)s::int8, %(hi)s::int8) g
            CROSS JOIN LATERAL (SELECT (random() * 200000)::int8 AS sent,
                   (20000 + (g / %(per)s) * 15000 + random() * 60000)::int AS ttft) s
            CROSS JOIN LATERAL (
                SELECT array_agg(s.ttft + k * (15000 + (g / %(per)s) * 2000)
                                 + (random() * 8000)::int ORDER BY k) AS offs,
                       array_agg((1 + (k %% 20 = 19)::int)::smallint ORDER BY k) AS toks,
                       sum(1 + (k %% 20 = 19)::int)::int AS toks_sum
                FROM generate_series(0, %(c)s::int - 1) k) a
            """,
            {
                "dt": 1.0 / LEVELS[0],
                "rid": rid,
                "regions": list(REGIONS),
                "per": per_level,
                "c": chunks,
                "lo": lo,
                "hi": min(lo + step, n) - 1,
            },
        )
        print(
            f"  generated {min(lo + step, n):>9,} rows "
            f"({(time.perf_counter_ns() - t) / 1e9:.1f} s)",
            flush=True,
        )
    conn.execute("ANALYZE requests")


def ensure_blocks(url: str, rid: str) -> None:
    """Pack the run's request_blocks once (a generated run has none)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM requests WHERE run_id = %s), "
            "(SELECT sum(n_requests) FROM request_blocks WHERE run_id = %s)",
            (rid, rid),
        ).fetchone()
    if row is not None and row[0] == row[1]:
        return
    t = time.perf_counter_ns()
    print("packing request_blocks (once) ...", flush=True)
    n = pack_run(url, rid)
    print(f"  {n} blocks ({(time.perf_counter_ns() - t) / 1e9:.1f} s)", flush=True)


def timed(label: str, results: dict[str, float], fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    t = time.perf_counter_ns()
    c = time.process_time_ns()
    out = fn(*args, **kwargs)
    results[label] = (time.perf_counter_ns() - t) / 1e9
    results[label + " [cpu]"] = (time.process_time_ns() - c) / 1e9
    print(
        f"{label:<40} {results[label]:8.2f} s wall, {results[label + ' [cpu]']:6.2f} s CPU "
        f"(this process)",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--summary", action="store_true", help="also time level_summary")
    ap.add_argument("--parallel", type=int, default=2, help="connections reading the run")
    ap.add_argument("--cache-dir", default="/tmp/peakload-bench-cache")
    ap.add_argument("--arrays", action="store_true", help="read the int[] columns, not blocks")
    ap.add_argument("--run", help="a stored run's id: the URL is then that run's database, as is")
    args = ap.parse_args()
    admin = os.environ.get("PEAKLOAD_BENCH_URL") or os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL")
    if not admin:
        sys.exit("set PEAKLOAD_BENCH_URL (or PEAKLOAD_TEST_TIMESCALE_URL) to a server's admin URL")
    url = admin if args.run else ensure_db(admin)
    rid = args.run or run_id_for(args.requests, args.chunks)
    with psycopg.connect(url, autocommit=True) as conn:
        have = conn.execute("SELECT count(*) FROM requests WHERE run_id = %s", (rid,)).fetchone()
        if args.run:
            if not have or not have[0]:
                sys.exit(f"--run {rid}: no requests stored for it")
        elif args.regenerate or not have or have[0] != args.requests:
            print(f"generating {args.requests:,} requests x {args.chunks} chunks ...")
            generate(conn, rid, args.requests, args.chunks)
        store = (
            "TimescaleDB "
            + str(
                conn.execute(
                    "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'"
                ).fetchone()
            )
            if buckets.has_timescaledb(conn)
            else "PostgreSQL (no TimescaleDB)"
        )
        server = conn.execute("SHOW server_version").fetchone()
    ensure_blocks(url, rid)
    results: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        levels = load.load_levels(conn, rid)
        run = load.load_run(conn, rid)
        fp = cache.fingerprint(conn, rid)
    cdir = Path(args.cache_dir)
    if fp is not None:  # this run's entry and kept results, from an earlier run of the bench
        entry = cache.entry_path(fp, cdir)
        shutil.rmtree(entry, ignore_errors=True)
        shutil.rmtree(entry.with_suffix(".results"), ignore_errors=True)
    with psycopg.connect(url, autocommit=True) as conn:  # and those kept in the store
        conn.execute("DELETE FROM run_results WHERE run_id = %s", (rid,))

    def compute(tag: str, df, chunks) -> tuple[int, int]:  # type: ignore[no-untyped-def]
        curves = timed(
            f"{tag}: percentile curves (4 metrics, bands)",
            results,
            percentiles.percentile_curves,
            df,
            chunks,
            resamples=args.resamples,
        )
        pts = timed(
            f"{tag}: frontier (p99 TTFT per level)",
            results,
            frontier.frontier_points,
            df,
            levels,
            chunks=chunks,
            resamples=args.resamples,
        )
        timed(
            f"{tag}: max load meeting SLOs",
            results,
            max_load.max_load_meeting_slos,
            df,
            levels,
            run["spec"]["slos"],
            chunks=chunks,
        )
        return len(curves), len(pts)

    t0 = time.perf_counter_ns()
    # blocks are read over one connection (analysis.store.packed); --parallel is the int[] path's
    path = f"int[] columns, x{args.parallel}" if args.arrays else "request_blocks"
    df, chunks = timed(
        f"cold: load from the store ({path})",
        results,
        fastload.load_requests_fast,
        url,
        rid,
        parallel=args.parallel,
        packed=not args.arrays,
    )
    n_curves, n_pts = compute("cold", df, chunks)
    results["cold total (load + curves + frontier)"] = (time.perf_counter_ns() - t0) / 1e9
    n_req, n_chunks = len(df), int(chunks.offsets_us.size)
    if fp is not None:

        def write_entry() -> None:  # written in a thread of its own: timed until it is on disk
            cache._save(cache.entry_path(fp, cdir), fp, df, chunks)
            cache.wait_for_writes(cache.entry_path(fp, cdir))

        timed("cache write (not in either total)", results, write_entry)
    del df, chunks
    t0 = time.perf_counter_ns()
    df, chunks, hit = timed(
        "warm: load from the cache (mmap)", results, cache.load_run_cached, url, rid, directory=cdir
    )
    compute("warm", df, chunks)
    results["warm total (load + curves + frontier)"] = (time.perf_counter_ns() - t0) / 1e9
    if args.summary:
        timed("level_summary (extra)", results, level_summary, df, levels, run, chunks=chunks)

    def kept_pass(label: str | None, directory: Path) -> None:
        """The curves and frontier through analysis.store.derived (as `peakload report` gets
        them), with `directory` as the local cache: no label writes them (untimed: what `run`
        does at a run's end, analysis.reports.report.keep_default_results), else they are read,
        from connecting on, and timed under `label`."""
        t = time.perf_counter_ns()
        with psycopg.connect(url, autocommit=True) as conn:
            kept = derived.RunResults.of(conn, rid, directory=directory)
            if kept.prefix is None:
                return  # not an ended run: nothing is kept
            metrics = percentiles.DEFAULT_CURVES
            curves = kept_curves(kept, df, chunks, metrics, args.resamples, 0)
            points = kept_frontier(kept, df, levels, chunks, "ttft_ms", 99.0, args.resamples, 0)
        if label is not None:
            results[label] = (time.perf_counter_ns() - t) / 1e9
            assert (len(curves), len(points)) == (n_curves, n_pts)

    kept_pass(None, cdir)
    kept_pass(KEPT_LOCAL, cdir)
    # another machine: an empty local cache, the results read from the store
    with tempfile.TemporaryDirectory(prefix="peakload-bench-") as elsewhere:
        kept_pass(KEPT_STORED, Path(elsewhere))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    report = {
        "requests": n_req,
        "chunks": n_chunks,
        "store": store,
        "cache_hit": hit,
        "server_version": server[0] if server else None,
        "curve_rows": n_curves,
        "frontier_levels": n_pts,
        "parallel": args.parallel,
        "read": path,
        "seconds": results,
        "peak_rss_gib": rss / 2**30,
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "loadavg_1m_at_end": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for k in (
        "cold total (load + curves + frontier)",
        "warm total (load + curves + frontier)",
        KEPT_LOCAL,
        KEPT_STORED,
    ):
        if k in results:
            print(f"{k:<60} {results[k]:8.2f} s")
    print(f"peak RSS {rss / 2**30:.2f} GiB")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
