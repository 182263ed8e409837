"""Run-level control state in PostgreSQL for distributed runs: the coordinated start time, the
abort flag, and the final status derived from the shards' states. Redis never holds any of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from workers.leases import ACTIVE_STATES

log = logging.getLogger(__name__)

ABORT_CHANNEL = "peakload:abort"  # Redis pub/sub nudge; the flag in PostgreSQL is the truth


@dataclass(frozen=True, slots=True)
class RunControl:
    status: str
    start_at_ref_ns: int | None  # reference clock ns since the epoch, None until set
    abort_requested: bool
    abort_reason: str | None


def read_control(conn: psycopg.Connection[Any], run_id: str) -> RunControl | None:
    row = conn.execute(
        "SELECT status, start_at_ref_ns, abort_requested_at IS NOT NULL, abort_reason "
        "FROM runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    return RunControl(str(row[0]), row[1], bool(row[2]), row[3])


def request_abort(conn: psycopg.Connection[Any], run_id: str, reason: str) -> bool:
    """Set the abort flag (first reason wins) and abort shards no worker has claimed yet.
    False if the run does not exist or has already ended."""
    with conn.transaction():
        row = conn.execute(
            """
            UPDATE runs SET abort_requested_at = COALESCE(abort_requested_at, now()),
                   abort_reason = COALESCE(abort_reason, %s)
             WHERE run_id = %s AND status IN ('pending', 'running')
            RETURNING 1
            """,
            (reason, run_id),
        ).fetchone()
        if row is None:
            return False
        conn.execute(
            "UPDATE shards SET state = 'aborted', state_reason = %s, ended_at = now() "
            "WHERE run_id = %s AND state = 'planned'",
            (f"run aborted before this shard was claimed: {reason}", run_id),
        )
    return True


def set_start(conn: psycopg.Connection[Any], run_id: str, start_at_ref_ns: int) -> bool:
    """Publish the coordinated start (reference clock ns); False if the run was aborted."""
    row = conn.execute(
        """
        UPDATE runs SET start_at_ref_ns = %s, status = 'running', started_at = now()
         WHERE run_id = %s AND status = 'pending' AND abort_requested_at IS NULL
        RETURNING 1
        """,
        (start_at_ref_ns, run_id),
    ).fetchone()
    return row is not None


def shard_states(conn: psycopg.Connection[Any], run_id: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT shard_id, state FROM shards WHERE run_id = %s ORDER BY shard_id", (run_id,)
    ).fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def decide_status(states: list[str], abort_requested: bool) -> str | None:
    """The run's final status from its shards' terminal states; None while any is unfinished."""
    if any(s in ACTIVE_STATES for s in states):
        return None
    if any(s == "planned" for s in states) and not abort_requested:
        return None
    if abort_requested:
        return "aborted"
    if states and all(s == "completed" for s in states):
        return "completed"
    if states and all(s == "failed" for s in states):
        return "failed"
    return "partial"


def finalize_run(conn: psycopg.Connection[Any], run_id: str) -> str | None:
    """End the run once every shard has ended (idempotent, safe from any process). Returns the
    final status, or None while shards are still active."""
    with conn.transaction():
        ctl = conn.execute(
            "SELECT status, abort_requested_at IS NOT NULL, abort_reason FROM runs "
            "WHERE run_id = %s FOR UPDATE",
            (run_id,),
        ).fetchone()
        if ctl is None:
            return None
        if ctl[0] not in ("pending", "running"):
            return str(ctl[0])
        rows = conn.execute(
            "SELECT shard_id, state, state_reason, requests_scheduled, valid, invalid_reasons "
            "FROM shards WHERE run_id = %s ORDER BY shard_id",
            (run_id,),
        ).fetchall()
        status = decide_status([str(r[1]) for r in rows], bool(ctl[1]))
        if status is None:
            return None
        reasons = [
            f"{r[0]}: {r[1]}" + (f" ({r[2]})" if r[2] else "") for r in rows if r[1] != "completed"
        ]
        if ctl[1]:
            reasons.insert(0, f"aborted: {ctl[2]}")
        reasons.extend(
            f"{sid}: clock offset uncertain (±{unc / 1e6:.1f} ms): its cross-region timeline "
            "is approximate"
            for sid, unc in conn.execute(
                "SELECT shard_id, clock_uncertainty_ns FROM shards "
                "WHERE run_id = %s AND clock_suspect ORDER BY shard_id",
                (run_id,),
            ).fetchall()
        )
        reasons.extend(_store_outage(conn, run_id))
        invalid: list[str] = []
        for r in rows:
            invalid.extend(f"{r[0]}: {x}" for x in (r[5] or []))
        valid = all(r[4] is True for r in rows) and status == "completed"
        _merge_levels(conn, run_id)
        conn.execute(
            """
            UPDATE runs SET status = %s, status_reason = %s, ended_at = now(),
                   requests_scheduled = %s, valid = %s, invalid_reasons = %s
             WHERE run_id = %s
            """,
            (
                status,
                "; ".join(reasons) or None,
                sum(int(r[3] or 0) for r in rows),
                valid,
                Jsonb(invalid),
                run_id,
            ),
        )
    log.info("run %s finished: %s", run_id, status)
    return status


def _store_outage(conn: psycopg.Connection[Any], run_id: str) -> list[str]:
    """One line if any shard's writer spooled while the store was unreachable (its counts in
    shards.extra.store): how many shards, batches spooled and replayed, records lost."""
    row = conn.execute(
        """
        SELECT count(*), sum((extra->'store'->>'spooled_batches')::bigint),
               sum((extra->'store'->>'replayed_batches')::bigint),
               sum((extra->'store'->>'records_lost')::bigint)
          FROM shards
         WHERE run_id = %s AND (extra->'store'->>'spooled_batches')::bigint > 0
        """,
        (run_id,),
    ).fetchone()
    if row is None or not row[0]:
        return []
    shards, spooled, replayed, lost = (int(x or 0) for x in row)
    return [
        f"the store was unreachable mid-run: {shards} shard(s) spooled {spooled} batch(es) "
        f"and replayed {replayed}" + (f"; {lost} records lost" if lost else "")
    ]


def _merge_levels(conn: psycopg.Connection[Any], run_id: str) -> None:
    """The run's levels from its shards' own (`store_runs.merge_levels`): a level's span covers
    every region; its steady window is where all of them were steady."""
    from workers.store import runs as store_runs

    per_shard = [
        list(levels or [])
        for (levels,) in conn.execute(
            "SELECT extra->'levels' FROM shards WHERE run_id = %s AND extra ? 'levels'", (run_id,)
        ).fetchall()
    ]
    merged = store_runs.merge_levels(per_shard)
    if merged:
        store_runs.upsert_levels(conn, run_id, merged)
    handed = {
        str(shard): search
        for shard, search in conn.execute(
            "SELECT shard_id, extra->'search' FROM shards WHERE run_id = %s", (run_id,)
        ).fetchall()
    }
    searches = {s: dict(a) for s, a in handed.items() if isinstance(a, dict)}
    # a shard killed, or stopped by Celery's time limit before its runner returned, handed in
    # no answer: the run's answer names it as stopped early instead of leaving it out unseen
    store_runs.set_search(conn, run_id, searches, [s for s in handed if s not in searches])
