"""Locust mode's store: `install()` makes every Locust test that uses `loadgen.locust.user.LLMUser`
a run in peakload's store (PEAKLOAD_DATABASE_URL, else the embedded one), and `python -m
workers.locust_store --fd N` is the engine process each Locust process drives, writing its shard's
records with the same StoreWriter as every other run.

The split keeps the layers: loadgen.locust.user (gevent, Locust) and loadgen.locust.engine (asyncio)
import no database driver; this module gives them a `RunStore` and a `ShardStore`.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from typing import Any

from psycopg.types.json import Jsonb

from loadgen.engine.plan import ShardPlan, Sink
from loadgen.errors import PeakloadError
from loadgen.locust.engine import ShardEnd
from loadgen.runspec.spec import Labels, RunSpec
from workers.store import runs as store_runs
from workers.store.connect import connect_store, database_url
from workers.store.embedded import data_home
from workers.store.writer import StoreWriter, WriterConfig

TERMINAL = ("completed", "interrupted", "timed_out", "aborted", "failed")
POLL_S = 0.2
DRIVER_LABEL = "load_driver"  # a label, so compare flags a Locust run against an open-loop one


class LocustRunStore:
    """The run bookkeeping of Locust tests (master or single process): run, levels, the end."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or database_url()
        self.engine_command = [sys.executable, "-m", "workers.locust_store"]
        self._conn: Any = None

    def conn(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = connect_store(self.url)
        return self._conn

    def begin(self, run_id: str, spec: RunSpec, *, mode: str) -> None:
        labels = spec.labels.model_dump(mode="json")
        labels[DRIVER_LABEL] = "locust"
        spec = spec.model_copy(update={"labels": Labels(**labels)})
        conn = self.conn()
        store_runs.create_run(conn, run_id, spec, mode=mode)
        store_runs.start_run(conn, run_id)

    def level(self, run_id: str, row: dict[str, Any]) -> None:
        store_runs.upsert_levels(self.conn(), run_id, [row])

    def finish(
        self,
        run_id: str,
        levels: list[dict[str, Any]],
        expected_shards: list[str],
        failed_shards: dict[str, str],
        wait_s: float,
    ) -> tuple[str, list[str]]:
        """Wait (up to `wait_s`) for every expected shard to end (`failed_shards`, whose engine
        never ran them, are not waited for), then end the run: completed when all did, partial
        when one failed or never reported, failed when none ran."""
        conn = self.conn()
        deadline = time.monotonic() + wait_s
        waited = [s for s in expected_shards if s not in failed_shards]
        while True:
            rows = _shards(conn, run_id)
            ended = {r[0]: r for r in rows if r[1] in TERMINAL}
            if all(s in ended for s in waited) or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)  # gevent's sleep in a Locust process: the master keeps serving
        reasons = [f"{shard}: {why}" for shard, why in failed_shards.items()]
        for shard in waited:
            if shard not in ended:
                reasons.append(f"{shard}: did not end within {wait_s:.0f} s of the test's stop")
        for shard_id, state, valid, why, _ in ended.values():
            if state != "completed":
                reasons.append(f"{shard_id}: {state}")
            if valid is False:
                reasons.extend(f"{shard_id}: {r}" for r in why or [])
        states = {r[1] for r in ended.values()}
        if not ended:
            status = "failed"
        elif states == {"completed"} and len(ended) >= len(expected_shards):
            status = "completed"
        else:
            status = "partial"
        scheduled = sum(int(r[4] or 0) for r in ended.values())
        if levels:
            store_runs.upsert_levels(conn, run_id, levels)
            _record_load(conn, run_id, levels)
        store_runs.finish_run(conn, run_id, status, not reasons, reasons, scheduled)
        return status, reasons


def _shards(conn: Any, run_id: str) -> list[tuple[Any, ...]]:
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT shard_id, state, valid, invalid_reasons, requests_scheduled FROM shards "
            "WHERE run_id = %s",
            (run_id,),
        )
        return list(cur.fetchall())


def _record_load(conn: Any, run_id: str, levels: list[dict[str, Any]]) -> None:
    """The stored spec's [load] says what Locust ran (its levels are the exact shape)."""
    load = {
        "concurrency": [max(1, int(lv["value"])) for lv in levels],
        "duration_s": max(max(float(lv["duration_s"]) for lv in levels), 1e-3),
    }
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "UPDATE runs SET spec = jsonb_set(spec, '{load}', %s) WHERE run_id = %s",
            (Jsonb(load), run_id),
        )


def install(url: str | None = None) -> None:
    """Make this locustfile's LLMUser tests runs in the store at `url` (default as every
    command: PEAKLOAD_DATABASE_URL, else the embedded PostgreSQL)."""
    # imported here, not at the top: the engine process runs this module and must not import
    # Locust (importing it monkey-patches sockets and threads with gevent)
    from loadgen.locust import user as locust_mode

    locust_mode.use_store(LocustRunStore(url))


class EngineShardStore:
    """The engine process's side: its shard row and the StoreWriter its records go to."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.writer: StoreWriter | None = None

    def begin(self, plan: ShardPlan) -> Sink:
        spec = plan.run_spec()
        with connect_store(self.url) as conn:
            store_runs.upsert_shard(
                conn, plan.run_id, plan.shard_id, plan.region, plan.slot, plan.to_json()
            )
            store_runs.set_shard_state(conn, plan.run_id, plan.shard_id, "running")
        self.writer = StoreWriter(
            self.url,
            plan.run_id,
            WriterConfig(
                spool_dir=data_home() / "spool" / plan.run_id / plan.shard_id,
                store_content=spec.store_content,
            ),
        )
        return self.writer

    def end(self, plan: ShardPlan, result: ShardEnd) -> None:
        written = self.writer.stats().rows_inserted if self.writer is not None else None
        with connect_store(self.url) as conn:
            store_runs.set_shard_state(
                conn,
                plan.run_id,
                plan.shard_id,
                result.status,
                reason=result.error,
                valid=result.valid,
                invalid_reasons=result.invalid_reasons,
                requests_scheduled=result.requests_scheduled,
                records_written=written,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.locust_store")
    parser.add_argument("--fd", type=int, required=True, help="the socket to the Locust process")
    args = parser.parse_args(argv)
    try:
        url = database_url()
    except PeakloadError as exc:
        print(f"peakload engine: {exc}", file=sys.stderr)
        return 1
    from loadgen.engine.runtime import run_measurement
    from loadgen.locust.engine import serve

    sock = socket.socket(fileno=args.fd)
    run_measurement(serve(sock, EngineShardStore(url)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
