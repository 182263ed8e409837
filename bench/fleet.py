"""Benchmark: a fleet on one machine. 64 shards in 10 regions (one prefork `celery worker` per
region, one process per shard) against the simulated engine, one run into one TimescaleDB,
with the store reached directly and through PgBouncer in transaction mode
(deploy/local/pgbouncer.sh). Per run: the most client connections the database held at once
(pg_stat_activity every 50 ms), start skew over the shards, the coordinator's submit-to-start
and run wall times, the ledger (rows stored against requests scheduled) and the Redis commands
the run cost (`INFO stats`). With `--levels N` (N > 1) the run has N levels that drain between
them, so every shard meets the others in the run's sample pool after each level (the barrier):
per transition, the time from the last shard's drain to the next level's first start, and how
far apart the shards' starts of the next level were. With `--search` the levels are the tries
of one saturation search (rate/4 up to the rate, an SLO every try meets), decided on the pooled
samples of all 64 shards: the same measures per try.

    PEAKLOAD_BENCH_URL=postgresql://... python bench/fleet.py [--repeats 2] [--levels 1] [--json F]

The URL is an admin URL of the TimescaleDB (default: PEAKLOAD_TEST_TIMESCALE_URL); a fresh
database is made for each mode and dropped. Redis, the sim, PgBouncer and the workers are
started and stopped here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.runspec.spec import RunSpec, spec_from_dict
from tests.support.celery_workers import CeleryWorker, RedisServer, SimServer
from tests.support.pgbouncer import BackendWatch, PgBouncer
from tests.support.stores import FreshDatabase, with_database
from workers.app import make_app
from workers.coordinator import Coordinator, SubmitOptions

REGIONS = {f"r{i}": 7 if i < 4 else 6 for i in range(10)}  # 64 shards


def fleet_spec(base_url: str, rate: float, duration_s: float, levels: int, search: bool) -> RunSpec:
    load: dict[str, Any] = {"arrival": "constant", "duration_s": duration_s}
    slos: list[dict[str, Any]] = []
    if search:  # `levels` tries from rate/4 up to rate, one search over every shard's samples
        load["saturation"] = {"start": rate / 4, "max": rate, "max_steps": levels}
        slos = [{"metric": "ttft_ms", "percentile": 99, "threshold": 800}]
    else:
        load.update(rate=[rate] * levels, between_levels="drain")
    return spec_from_dict(
        {
            "name": "bench-fleet",
            "target": {"api": "openai-chat", "base_url": base_url, "model": "sim"},
            "workload": {"prompt_tokens": 16, "output_tokens": 8, "seed": 3},
            "load": load,
            "slos": slos,
            "regions": [{"name": r, "share": n / 64, "workers": n} for r, n in REGIONS.items()],
        }
    )


def barriers(level_rows: list[list[dict[str, Any]]]) -> list[dict[str, float]]:
    """Per transition between levels, over the shards' stored levels: ms from the last shard's
    drain of level k to the first start of level k+1, and the spread of the k+1 starts."""
    out = []
    n = min(len(rows) for rows in level_rows)
    for k in range(n - 1):
        drained = max(int(rows[k]["drained_at_ns"]) for rows in level_rows)
        starts = [int(rows[k + 1]["started_at_ns"]) for rows in level_rows]
        out.append(
            {
                "last_drain_to_next_start_ms": (min(starts) - drained) / 1e6,
                "next_start_spread_ms": (max(starts) - min(starts)) / 1e6,
            }
        )
    return out


def redis_commands(url: str) -> int:
    with redis.Redis.from_url(url) as r:
        return int(r.info("stats")["total_commands_processed"])


def one_mode(
    admin_url: str,
    pooler: bool,
    repeats: int,
    rate: float,
    duration_s: float,
    pool: int,
    levels: int,
    search: bool,
) -> dict[str, Any]:
    db = FreshDatabase(admin_url)
    workdir = Path(tempfile.mkdtemp(prefix="peakload-bench-fleet-"))
    redis_server = RedisServer(workdir)
    sim = SimServer("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5")
    pgb = PgBouncer(db.url, pool=pool) if pooler else None
    url = pgb.url if pgb else db.url
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PEAKLOAD_")},
        "PEAKLOAD_DATABASE_URL": url,
        "PEAKLOAD_REDIS_URL": redis_server.url(0),
        "PEAKLOAD_ALLOW_PRIVATE_TARGETS": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    os.environ["PEAKLOAD_ALLOW_PRIVATE_TARGETS"] = "1"
    workers = [
        CeleryWorker(r, env, workdir, concurrency=n, index=i)
        for i, (r, n) in enumerate(REGIONS.items())
    ]
    runs = []
    try:
        for w in workers:
            w.wait_ready(180)
        coord = Coordinator(url, redis_server.url(0), make_app(redis_server.url(0)))
        dbname = urlsplit(db.url).path.lstrip("/")
        for _ in range(repeats):
            s = fleet_spec(sim.base_url, rate, duration_s, levels, search)
            redis0 = redis_commands(redis_server.url(0))
            with BackendWatch(with_database(db.url, "postgres"), dbname) as watch:
                t0 = time.perf_counter()
                launch = coord.submit(s, SubmitOptions(ready_timeout_s=180, preflight=False))
                if not launch.started:
                    raise SystemExit(f"start aborted: {launch.reason}")
                t_started = time.perf_counter()
                status = coord.wait(launch.run_id, timeout_s=600)
                t_end = time.perf_counter()
            redis_used = redis_commands(redis_server.url(0)) - redis0
            with psycopg.connect(db.url, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT sum(requests_scheduled), sum(records_written), "
                    "array_agg(abs(start_skew_ns)), count(*) FILTER (WHERE valid IS FALSE) "
                    "FROM shards WHERE run_id = %s",
                    (launch.run_id,),
                ).fetchone()
                stored = conn.execute(
                    "SELECT count(*), count(DISTINCT request_id) FROM requests WHERE run_id = %s",
                    (launch.run_id,),
                ).fetchone()
                level_rows = [
                    r[0]
                    for r in conn.execute(
                        "SELECT extra->'levels' FROM shards WHERE run_id = %s", (launch.run_id,)
                    )
                ]
                reasons = Counter(
                    re.sub(r"\d+(\.\d+)?", "#", str(why))  # one count per kind of reason
                    for (whys,) in conn.execute(
                        "SELECT invalid_reasons FROM shards WHERE run_id = %s", (launch.run_id,)
                    )
                    for why in whys or []
                )
            assert rows is not None and stored is not None
            skews = np.asarray([x for x in rows[2] if x is not None], dtype=float) / 1e6
            runs.append(
                {
                    "status": status,
                    "shards": len(skews),
                    "scheduled": int(rows[0]),
                    "stored": int(stored[0]),
                    "distinct": int(stored[1]),
                    "peak_db_connections": watch.peak,
                    "connection_samples": watch.samples,
                    "skew_ms_p50": float(np.percentile(skews, 50)),
                    "skew_ms_p99": float(np.percentile(skews, 99)),
                    "skew_ms_max": float(skews.max()),
                    "shards_flagged_invalid": int(rows[3]),
                    "invalid_reasons": dict(reasons.most_common()),
                    "submit_to_start_s": t_started - t0,
                    "run_wall_s": t_end - t0,
                    "redis_commands": redis_used,
                    "barriers": barriers(level_rows),
                }
            )
            print(json.dumps({"pooler": pooler, **runs[-1]}), flush=True)
    finally:
        for w in workers:
            w.stop()
        if pgb:
            pgb.stop()
        sim.stop()
        redis_server.stop()
        db.drop_now()
    return {"pooler": "pgbouncer" if pooler else "none", "pool": pool if pooler else None,
            "runs": runs}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rate", type=float, default=64.0, help="requests/s, whole run")
    ap.add_argument("--duration", type=float, default=10.0, help="s")
    ap.add_argument("--pool", type=int, default=20, help="PgBouncer's server connections")
    ap.add_argument("--modes", default="none,pgbouncer")
    ap.add_argument("--levels", type=int, default=1, help="levels, drained between (barriers)")
    ap.add_argument("--search", action="store_true", help="a saturation search of --levels tries")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    admin = os.environ.get("PEAKLOAD_BENCH_URL") or os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL")
    if not admin:
        raise SystemExit("set PEAKLOAD_BENCH_URL (or PEAKLOAD_TEST_TIMESCALE_URL)")
    out = {
        "machine": {"node": platform.node(), "cpus": os.cpu_count(), "python": sys.version},
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "shape": {
            "regions": REGIONS,
            "rate": args.rate,
            "duration_s": args.duration,
            "levels": args.levels,
            "search": args.search,
        },
        "modes": [
            one_mode(
                admin,
                mode == "pgbouncer",
                args.repeats,
                args.rate,
                args.duration,
                args.pool,
                args.levels,
                args.search,
            )
            for mode in args.modes.split(",")
        ],
    }
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
