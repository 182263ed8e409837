"""Exactly-once shards: a fencing token and a lease in the `shards` row. Claiming is one atomic
UPDATE ... WHERE state='planned'; every later write carries the token, so a redelivered task, a
duplicate, or a worker the reaper already declared dead can never write (or run) again.
Lease times use the database's clock (`now()`), the one clock every worker shares.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)

LEASE_TTL_S = 90.0  # renewed every TTL/3; must outlast a tolerated database outage (D3: 60 s)
ACTIVE_STATES = ("claimed", "ready", "running")
TERMINAL_STATES = ("completed", "interrupted", "timed_out", "aborted", "failed")


@dataclass(frozen=True, slots=True)
class Lease:
    run_id: str
    shard_id: str
    token: int
    owner: str


def claim_shard(
    conn: psycopg.Connection[Any],
    run_id: str,
    shard_id: str,
    owner: str,
    *,
    host: str,
    pid: int,
    ttl_s: float = LEASE_TTL_S,
) -> Lease | None:
    """Claim a `planned` shard of a run that is not being aborted; None if someone (or an earlier
    delivery of the same task) already claimed it, or the run was aborted before it started."""
    row = conn.execute(
        """
        UPDATE shards s
           SET state = 'claimed', fencing_token = s.fencing_token + 1, lease_owner = %s,
               lease_expires_at = now() + make_interval(secs => %s), host = %s, pid = %s
          FROM runs r
         WHERE s.run_id = %s AND s.shard_id = %s AND s.state = 'planned'
           AND r.run_id = s.run_id AND r.abort_requested_at IS NULL
        RETURNING s.fencing_token
        """,
        (owner, ttl_s, host, pid, run_id, shard_id),
    ).fetchone()
    if row is None:
        return None
    return Lease(run_id, shard_id, int(row[0]), owner)


def shard_state(conn: psycopg.Connection[Any], run_id: str, shard_id: str) -> str | None:
    row = conn.execute(
        "SELECT state FROM shards WHERE run_id = %s AND shard_id = %s", (run_id, shard_id)
    ).fetchone()
    return None if row is None else str(row[0])


def renew_lease(conn: psycopg.Connection[Any], lease: Lease, ttl_s: float = LEASE_TTL_S) -> bool:
    """Extend the lease; False when this worker has been fenced out (stop at once)."""
    row = conn.execute(
        """
        UPDATE shards SET lease_expires_at = now() + make_interval(secs => %s)
         WHERE run_id = %s AND shard_id = %s AND fencing_token = %s AND state = ANY(%s)
        RETURNING 1
        """,
        (ttl_s, lease.run_id, lease.shard_id, lease.token, list(ACTIVE_STATES)),
    ).fetchone()
    return row is not None


def mark_ready(
    conn: psycopg.Connection[Any],
    lease: Lease,
    *,
    clock_offset_ns: int,
    clock_uncertainty_ns: int,
    clock_suspect: bool,
    network_rtt_ns: int | None,
    connect_ns: int | None,
    extra: dict[str, Any],
) -> bool:
    """Check in: connections warmed and clock measured. Fenced."""
    row = conn.execute(
        """
        UPDATE shards SET state = 'ready', ready_at = now(), clock_offset_ns = %s,
               clock_uncertainty_ns = %s, clock_suspect = %s, network_rtt_ns = %s,
               connect_ns = %s, extra = extra || %s
         WHERE run_id = %s AND shard_id = %s AND fencing_token = %s AND state = 'claimed'
        RETURNING 1
        """,
        (
            clock_offset_ns,
            clock_uncertainty_ns,
            clock_suspect,
            network_rtt_ns,
            connect_ns,
            Jsonb(extra),
            lease.run_id,
            lease.shard_id,
            lease.token,
        ),
    ).fetchone()
    return row is not None


def mark_running(
    conn: psycopg.Connection[Any], lease: Lease, *, start_skew_ns: int, started_ref_ns: int
) -> bool:
    """`started_ref_ns`: when the shard started, on the run's reference clock (ns since the
    epoch); the store may hear of it later."""
    row = conn.execute(
        """
        UPDATE shards SET state = 'running', start_skew_ns = %s,
               started_at = to_timestamp(%s::float8 / 1e9)
         WHERE run_id = %s AND shard_id = %s AND fencing_token = %s AND state = 'ready'
        RETURNING 1
        """,
        (start_skew_ns, started_ref_ns, lease.run_id, lease.shard_id, lease.token),
    ).fetchone()
    return row is not None


def finish_shard(
    conn: psycopg.Connection[Any],
    lease: Lease,
    state: str,
    *,
    reason: str | None = None,
    requests_scheduled: int = 0,
    records_written: int = 0,
    valid: bool | None = None,
    invalid_reasons: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    start_skew_ns: int | None = None,
) -> bool:
    """Move an active shard to a terminal state; False if fenced out (the reaper got there
    first: the shard stays `interrupted`, its rows stay)."""
    if state not in TERMINAL_STATES:
        raise ValueError(f"not a terminal shard state: {state!r}")
    row = conn.execute(
        """
        UPDATE shards SET state = %s, state_reason = %s, ended_at = now(),
               requests_scheduled = %s, records_written = %s, valid = %s,
               invalid_reasons = %s, extra = extra || %s, lease_expires_at = NULL,
               start_skew_ns = COALESCE(start_skew_ns, %s)
         WHERE run_id = %s AND shard_id = %s AND fencing_token = %s AND state = ANY(%s)
        RETURNING 1
        """,
        (
            state,
            reason,
            requests_scheduled,
            records_written,
            valid,
            Jsonb(invalid_reasons or []),
            Jsonb(extra or {}),
            start_skew_ns,
            lease.run_id,
            lease.shard_id,
            lease.token,
            list(ACTIVE_STATES),
        ),
    ).fetchone()
    if row is None:
        log.warning(
            "shard %s/%s: fenced out, final state %s not written",
            lease.run_id,
            lease.shard_id,
            state,
        )
    return row is not None


def reap_expired(conn: psycopg.Connection[Any], run_id: str | None = None) -> list[tuple[str, str]]:
    """Shards whose worker stopped renewing (crashed, killed, partitioned) become `interrupted`;
    their rows are kept. Returns the (run_id, shard_id) pairs reaped."""
    rows = conn.execute(
        """
        UPDATE shards SET state = 'interrupted', ended_at = now(),
               state_reason = 'lease expired: the worker stopped renewing (crashed or killed)'
         WHERE state = ANY(%s) AND lease_expires_at < now()
           AND (%s::uuid IS NULL OR run_id = %s::uuid)
        RETURNING run_id::text, shard_id
        """,
        (list(ACTIVE_STATES), run_id, run_id),
    ).fetchall()
    for r in rows:
        log.warning("shard %s/%s interrupted: lease expired", r[0], r[1])
    return [(str(r[0]), str(r[1])) for r in rows]
