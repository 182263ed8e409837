"""Storing an imported run: the run, its level and shard rows, every record (the store writer's
own COPY payloads and block rows, workers/store/copyenc and batchsql) and the import's notes, all
in one transaction, so a file that fails half-way leaves nothing behind."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from loadgen.errors import StoreError
from workers.imports.mapping import IMPORT_REGION, IMPORT_SHARD, Mapped
from workers.store import batchsql, copyenc
from workers.store import runs as store_runs
from workers.store.spool import EncodedBatch

BATCH_ROWS = 5_000  # records per COPY (and per packed block), as the writer's batches


def store_import(conn: psycopg.Connection[Any], mapped: Mapped, run_id: str) -> None:
    """Write `mapped` (workers.imports.mapping.map_run, made with `run_id`) as one completed run.
    One transaction: on any error nothing is kept. Raises StoreError."""
    spec, records = mapped.spec, mapped.records
    has_blocks = bool(
        (row := conn.execute("SELECT to_regclass('request_blocks') IS NOT NULL").fetchone())
        and row[0]
    )
    try:
        with conn.transaction():
            store_runs.create_run(conn, run_id, spec, mode="local")
            store_runs.start_run(conn, run_id)
            store_runs.upsert_levels(conn, run_id, mapped.levels)
            store_runs.upsert_shard(
                conn,
                run_id,
                IMPORT_SHARD,
                IMPORT_REGION,
                0,
                {"imported_from": mapped.notes["tool"]},
                requests_scheduled=len(records),
            )
            for i in range(0, len(records), BATCH_ROWS):
                part = records[i : i + BATCH_ROWS]
                req, blk = copyenc.encode_batch(part, False, blocks=has_blocks)
                batchsql.write_batch(
                    conn, EncodedBatch(req, b"", len(part), 0, blk), staged=False,
                    with_blocks=has_blocks,
                )  # fmt: skip
            store_runs.set_shard_state(
                conn,
                run_id,
                IMPORT_SHARD,
                "completed",
                valid=True,
                requests_scheduled=len(records),
                records_written=len(records),
            )
            conn.execute(
                "INSERT INTO run_imports (run_id, tool, tool_version, source, notes) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    run_id,
                    mapped.notes["tool"],
                    mapped.notes["tool_version"],
                    mapped.notes["source"],
                    Jsonb(mapped.notes),
                ),
            )
            store_runs.finish_run(conn, run_id, "completed", True, [], len(records))
            _tool_span(conn, run_id, mapped.levels)
    except copyenc.EncodeError as e:
        raise StoreError(f"the imported run cannot be stored: {e}") from e
    except psycopg.Error as e:
        raise StoreError(f"the store refused the imported run: {str(e).strip()}") from e


def _tool_span(conn: psycopg.Connection[Any], run_id: str, levels: list[dict[str, Any]]) -> None:
    """The run's start and end as the tool ran it (not the import's own moment)."""
    starts = [lv["started_at_ns"] for lv in levels if lv.get("started_at_ns") is not None]
    ends = [lv["ended_at_ns"] for lv in levels if lv.get("ended_at_ns") is not None]
    if starts and ends:
        conn.execute(
            "UPDATE runs SET started_at = to_timestamp(%s), ended_at = to_timestamp(%s) "
            "WHERE run_id = %s",
            (min(starts) / 1e9, max(ends) / 1e9, run_id),
        )


def new_run_id() -> str:
    return str(uuid.uuid4())
