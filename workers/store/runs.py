"""Run bookkeeping in the store: the `runs`, `run_levels` and `shards` rows the local runner and
the Celery coordinator create and update. Each function commits its own change (or joins the
caller's open `conn.transaction()`); wall-clock `*_ns` values are ns since the Unix epoch.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.types.json import Jsonb

from loadgen.errors import StoreError
from loadgen.runspec.spec import RunSpec
from loadgen.scrub import scrub
from workers.store.searches import merge_searches

RUN_STATUSES = ("pending", "running", "completed", "partial", "aborted", "failed")
SHARD_STATES = (
    "planned", "claimed", "ready", "running", "completed", "interrupted", "timed_out", "aborted",
    "failed",
)  # fmt: skip


def public_target_url(url: str) -> str:
    """A target URL as stored: scheme, host, port and path only (no credentials, query or
    fragment, where API keys sometimes hide)."""
    p = urlsplit(url)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{p.port}" if p.port else host
    return urlunsplit((p.scheme, netloc, p.path, "", ""))


@contextmanager
def _tx(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[Any]]:
    with conn.transaction(), conn.cursor() as cur:
        yield cur


def _wall(ns: int | None) -> Any:
    """ns since the epoch -> a value PostgreSQL reads as timestamptz (via to_timestamp)."""
    return None if ns is None else ns / 1e9


def create_run(
    conn: psycopg.Connection[Any],
    run_id: str,
    spec: RunSpec,
    *,
    mode: str,
    schedule_name: str | None = None,
    owner: str | None = None,
    launched_by: str | None = None,
) -> None:
    """Insert the run (status pending) with its public spec and labels. Idempotent on run_id:
    a second call with the same id changes nothing. `owner` (host:pid[:birth]) is the process
    holding a local run's lease: its heartbeat starts now. `launched_by` is the person who
    started it (deploy/sql/0230)."""
    if mode not in ("local", "distributed"):
        raise StoreError(f"create_run: mode must be 'local' or 'distributed', got {mode!r}")
    labels = spec.labels.model_dump(mode="json", exclude_none=True)
    with _tx(conn) as cur:
        cur.execute(
            """INSERT INTO runs (run_id, name, mode, api, target_url, model, labels, spec,
                                 schedule_name, store_content, owner, heartbeat_at, launched_by)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                       CASE WHEN %s::text IS NULL THEN NULL ELSE now() END, %s)
               ON CONFLICT (run_id) DO NOTHING""",
            (
                run_id,
                spec.name,
                mode,
                spec.target.api,
                public_target_url(spec.target.base_url),
                spec.target.model,
                Jsonb(labels),
                Jsonb(spec.public_dict()),
                schedule_name,
                spec.store_content,
                owner,
                owner,
                launched_by,
            ),
        )


def set_run_status(
    conn: psycopg.Connection[Any], run_id: str, status: str, reason: str | None = None
) -> None:
    _check(status, RUN_STATUSES, "run status")
    with _tx(conn) as cur:
        cur.execute(
            "UPDATE runs SET status = %s, status_reason = COALESCE(%s, status_reason) "
            "WHERE run_id = %s",
            (status, _clean(reason), run_id),
        )
        _found(cur, "run", run_id)


def start_run(conn: psycopg.Connection[Any], run_id: str) -> None:
    """Mark the run running, stamping started_at (the database's clock) once."""
    with _tx(conn) as cur:
        cur.execute(
            "UPDATE runs SET status = 'running', started_at = COALESCE(started_at, now()) "
            "WHERE run_id = %s",
            (run_id,),
        )
        _found(cur, "run", run_id)


def finish_run(
    conn: psycopg.Connection[Any],
    run_id: str,
    status: str,
    valid: bool,
    invalid_reasons: list[str],
    requests_scheduled: int,
    reason: str | None = None,
) -> None:
    """The run's end: final status, validity and why not, requests scheduled, ended_at."""
    _check(status, RUN_STATUSES, "run status")
    why = Jsonb([scrub(r) for r in invalid_reasons])
    with _tx(conn) as cur:
        cur.execute(
            """UPDATE runs SET status = %s, valid = %s, invalid_reasons = %s,
                   requests_scheduled = %s, status_reason = COALESCE(%s, status_reason),
                   ended_at = now()
               WHERE run_id = %s""",
            (status, valid, why, requests_scheduled, _clean(reason), run_id),
        )
        _found(cur, "run", run_id)


def set_search(
    conn: psycopg.Connection[Any],
    run_id: str,
    per_shard: dict[str, dict[str, Any]],
    without: Iterable[str] = (),
) -> None:
    """Store the run's saturation answer (merge_searches of its shards') on the run; `without`
    names its shards that handed in none."""
    if not per_shard:
        return
    search = merge_searches(per_shard, without)
    with _tx(conn) as cur:
        cur.execute("UPDATE runs SET search = %s WHERE run_id = %s", (Jsonb(search), run_id))
        _found(cur, "run", run_id)


def level_row(level: Any) -> dict[str, Any]:
    """The `upsert_levels` row of a load level: `loadgen.engine.schedule.Level` (planned) or
    `loadgen.engine.levels.LevelResult` (as run, with its wall-clock span, steady window, drain
    time, between-levels policy and search decision)."""
    row = {
        "level": level.index,
        "kind": level.kind,
        "value": level.value,
        "duration_s": level.duration_s,
        "warmup_s": level.warmup_s,
        "cooldown_s": level.cooldown_s,
    }
    if hasattr(level, "started_wall_ns"):
        row["started_at_ns"] = level.started_wall_ns
        row["ended_at_ns"] = level.ended_wall_ns
        row["steady_start_ns"] = level.steady_start_wall_ns
        row["steady_end_ns"] = level.steady_end_wall_ns
        row["drained_at_ns"] = level.drained_wall_ns
        row["between_levels"] = level.between_levels
        row["search"] = level.search
    return row


def merge_levels(per_shard: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One run's levels from its shards' `level_row`s: earliest start and latest end of each
    level; its steady window the span in which every shard that ran it was steady (latest
    steady start to earliest steady end), so throughput pooled over shards divides by a window
    in which all of them were loading; the latest drain."""
    merged: dict[int, dict[str, Any]] = {}
    for levels in per_shard:
        for lv in levels:
            k = int(lv["level"])
            if k not in merged:
                merged[k] = dict(lv)
                continue
            m = merged[k]
            for key, pick in (
                ("started_at_ns", min),
                ("ended_at_ns", max),
                ("steady_start_ns", max),
                ("steady_end_ns", min),
                ("drained_at_ns", max),
            ):
                vals = [x for x in (m.get(key), lv.get(key)) if x is not None]
                m[key] = pick(vals) if vals else None
            if m.get("search") is None:
                m["search"] = lv.get("search")
    out = [merged[k] for k in sorted(merged)]
    for m in out:
        s, e = m.get("steady_start_ns"), m.get("steady_end_ns")
        if s is not None and e is not None and e < s:
            m["steady_end_ns"] = s  # never steady together: an empty window, not a negative one
    return out


def upsert_levels(conn: psycopg.Connection[Any], run_id: str, levels: list[dict[str, Any]]) -> None:
    """Insert or update load levels. Keys: level, kind, value, duration_s, and optionally
    warmup_s, cooldown_s, started_at_ns, ended_at_ns, steady_start_ns, steady_end_ns,
    drained_at_ns (wall ns), between_levels, search (None keeps what is stored)."""
    rows = []
    for i, lv in enumerate(levels):
        try:
            rows.append((
                run_id, int(lv["level"]), str(lv["kind"]), float(lv["value"]),
                float(lv["duration_s"]), float(lv.get("warmup_s", 0.0)),
                float(lv.get("cooldown_s", 0.0)), _wall(lv.get("started_at_ns")),
                _wall(lv.get("ended_at_ns")), _wall(lv.get("steady_start_ns")),
                _wall(lv.get("steady_end_ns")), _wall(lv.get("drained_at_ns")),
                lv.get("between_levels"),
                None if lv.get("search") is None else Jsonb(lv["search"]),
            ))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise StoreError(f"upsert_levels: level entry [{i}] is malformed: {e!r}") from e
    with _tx(conn) as cur:
        cur.executemany(
            """INSERT INTO run_levels (run_id, level, kind, value, duration_s, warmup_s,
                                       cooldown_s, started_at, ended_at, steady_start,
                                       steady_end, drained_at, between_levels, search)
               VALUES (%s, %s, %s, %s, %s, %s, %s, to_timestamp(%s), to_timestamp(%s),
                       to_timestamp(%s), to_timestamp(%s), to_timestamp(%s), %s, %s)
               ON CONFLICT (run_id, level) DO UPDATE SET
                   kind = EXCLUDED.kind, value = EXCLUDED.value,
                   duration_s = EXCLUDED.duration_s, warmup_s = EXCLUDED.warmup_s,
                   cooldown_s = EXCLUDED.cooldown_s,
                   started_at = COALESCE(EXCLUDED.started_at, run_levels.started_at),
                   ended_at = COALESCE(EXCLUDED.ended_at, run_levels.ended_at),
                   steady_start = COALESCE(EXCLUDED.steady_start, run_levels.steady_start),
                   steady_end = COALESCE(EXCLUDED.steady_end, run_levels.steady_end),
                   drained_at = COALESCE(EXCLUDED.drained_at, run_levels.drained_at),
                   between_levels = COALESCE(EXCLUDED.between_levels,
                                             run_levels.between_levels),
                   search = COALESCE(EXCLUDED.search, run_levels.search)""",
            rows,
        )


def upsert_shard(
    conn: psycopg.Connection[Any],
    run_id: str,
    shard_id: str,
    region: str,
    slot: int,
    plan: dict[str, Any],
    *,
    requests_scheduled: int = 0,
) -> None:
    """Insert a planned shard, or refresh its plan while it is still planned."""
    json.dumps(plan)  # fail here, naming the shard, rather than deep inside psycopg
    with _tx(conn) as cur:
        cur.execute(
            """INSERT INTO shards (run_id, shard_id, region, slot, plan, requests_scheduled)
               VALUES (%s, %s, %s, %s, %s, %s)
               ON CONFLICT (run_id, shard_id) DO UPDATE SET
                   region = EXCLUDED.region, slot = EXCLUDED.slot, plan = EXCLUDED.plan,
                   requests_scheduled = EXCLUDED.requests_scheduled
               WHERE shards.state = 'planned'""",
            (run_id, shard_id, region, slot, Jsonb(plan), requests_scheduled),
        )


def set_shard_network(
    conn: psycopg.Connection[Any],
    run_id: str,
    shard_id: str,
    network_rtt_ns: int | None,
    connect_ns: int | None,
) -> None:
    """A local shard's warm-up probe (distributed shards report theirs on check-in)."""
    with _tx(conn) as cur:
        cur.execute(
            "UPDATE shards SET network_rtt_ns = %s, connect_ns = %s "
            "WHERE run_id = %s AND shard_id = %s",
            (network_rtt_ns, connect_ns, run_id, shard_id),
        )


def set_shard_state(
    conn: psycopg.Connection[Any],
    run_id: str,
    shard_id: str,
    state: str,
    *,
    reason: str | None = None,
    valid: bool | None = None,
    invalid_reasons: list[str] | None = None,
    requests_scheduled: int | None = None,
    records_written: int | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Move a shard to `state`; running stamps started_at, a terminal state ended_at. Fields
    given as None are left as stored; `extra`'s keys are merged into the stored `extra`."""
    _check(state, SHARD_STATES, "shard state")
    terminal = state in ("completed", "interrupted", "timed_out", "aborted", "failed")
    with _tx(conn) as cur:
        cur.execute(
            """UPDATE shards SET state = %s,
                   state_reason = COALESCE(%s, state_reason),
                   valid = COALESCE(%s, valid),
                   invalid_reasons = COALESCE(%s, invalid_reasons),
                   requests_scheduled = COALESCE(%s, requests_scheduled),
                   records_written = COALESCE(%s, records_written),
                   extra = COALESCE(extra, '{}'::jsonb) || COALESCE(%s, '{}'::jsonb),
                   started_at = CASE WHEN %s THEN COALESCE(started_at, now()) ELSE started_at END,
                   ended_at = CASE WHEN %s THEN now() ELSE ended_at END
               WHERE run_id = %s AND shard_id = %s""",
            (
                state,
                _clean(reason),
                valid,
                None if invalid_reasons is None else Jsonb([scrub(r) for r in invalid_reasons]),
                requests_scheduled,
                records_written,
                None if extra is None else Jsonb(extra),
                state == "running",
                terminal,
                run_id,
                shard_id,
            ),
        )
        _found(cur, "shard", f"{run_id}/{shard_id}")


def fail_run(conn: psycopg.Connection[Any], run_id: str, reason: str) -> None:
    """End a run that cannot go on as `failed` with `reason`, and every shard not yet ended
    with it: nothing is left `running`. Keeps what was written."""
    reason = scrub(reason)
    with _tx(conn) as cur:
        cur.execute(
            """UPDATE shards SET state = 'failed', state_reason = COALESCE(state_reason, %s),
                   ended_at = now()
               WHERE run_id = %s
                 AND state NOT IN ('completed', 'interrupted', 'timed_out', 'aborted', 'failed')""",
            (reason[:500], run_id),
        )
        cur.execute(
            """UPDATE runs SET status = 'failed', valid = false, status_reason = %s,
                   invalid_reasons = invalid_reasons || %s, ended_at = COALESCE(ended_at, now())
               WHERE run_id = %s AND status IN ('pending', 'running')""",
            (reason[:500], Jsonb([reason[:500]]), run_id),
        )


def heartbeat(conn: psycopg.Connection[Any], run_id: str) -> str | None:
    """Stamp a live local run's heartbeat. Returns the abort reason once `peakload abort` has
    asked for one (else None)."""
    with _tx(conn) as cur:
        cur.execute(
            """UPDATE runs SET heartbeat_at = now() WHERE run_id = %s
               RETURNING abort_requested_at IS NOT NULL, abort_reason""",
            (run_id,),
        )
        row = cur.fetchone()
    if row is None or not row[0]:
        return None
    return str(row[1] or "aborted by the operator")


def live_local_runs(conn: psycopg.Connection[Any]) -> list[tuple[str, str | None, float]]:
    """Pending and running local runs that hold a lease: (run_id, owner host:pid[:birth], seconds
    since the heartbeat). Runs created without an owner (older versions, Locust mode) have no
    heartbeat to judge and are left alone."""
    with _tx(conn) as cur:
        cur.execute(
            """SELECT run_id::text, owner,
                      EXTRACT(EPOCH FROM now() - COALESCE(heartbeat_at, created_at))::float8
               FROM runs WHERE mode = 'local' AND status IN ('pending', 'running')
                 AND owner IS NOT NULL"""
        )
        return [(str(r[0]), r[1], float(r[2])) for r in cur.fetchall()]


def count_requests(conn: psycopg.Connection[Any], run_id: str) -> int:
    """Rows in `requests` for the run."""
    with _tx(conn) as cur:
        cur.execute("SELECT count(*) FROM requests WHERE run_id = %s", (run_id,))
        row = cur.fetchone()
    return int(row[0]) if row else 0


def count_requests_by_shard(conn: psycopg.Connection[Any], run_id: str) -> dict[str, int]:
    """Rows in `requests` for the run, per shard (what each shard wrote)."""
    with _tx(conn) as cur:
        cur.execute(
            "SELECT shard_id, count(*) FROM requests WHERE run_id = %s GROUP BY shard_id",
            (run_id,),
        )
        return {str(r[0]): int(r[1]) for r in cur.fetchall()}


def _clean(reason: str | None) -> str | None:
    """A reason as stored: scrubbed (loadgen.scrub), for it may quote a server's answer."""
    return None if reason is None else scrub(reason)


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise StoreError(f"unknown {what} {value!r}; one of {', '.join(allowed)}")


def _found(cur: psycopg.Cursor[Any], what: str, key: str) -> None:
    if cur.rowcount == 0:
        raise StoreError(f"no {what} {key} in the store")
