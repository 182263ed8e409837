"""Nightly (or any cron) schedules, state in PostgreSQL. Each (schedule, slot) is claimed by an
INSERT into `schedule_slots` whose UNIQUE (name, slot) is the lock: with two beat processes only
one INSERT wins, so a slot fires exactly once. A slot found too late (everything was down) is
recorded `missed`, never skipped silently. Cron is evaluated in UTC; a 6th field means seconds.
Run by Celery beat: `celery -A workers.app beat -S workers.schedules:PgScheduler`.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from celery import beat
from croniter import croniter
from psycopg.types.json import Jsonb

from loadgen.errors import SpecError
from loadgen.runspec.secrets import literal_secrets
from loadgen.runspec.spec import RunSpec, spec_from_dict

log = logging.getLogger(__name__)

TICK_S = float(os.environ.get("PEAKLOAD_SCHEDULE_TICK_S", "5"))
LATE_GRACE_S = 120.0  # a slot found later than this after its time is `missed`, not fired
MAX_SLOTS_PER_TICK = 1000  # a long outage records at most this many missed slots per tick


@dataclass(frozen=True, slots=True)
class SlotOutcome:
    name: str
    slot: datetime
    state: str  # fired | missed | failed
    run_id: str | None


def check_cron(cron: str) -> str:
    cron = " ".join(cron.split())
    if len(cron.split()) not in (5, 6) or not croniter.is_valid(cron):
        raise SpecError(
            f"not a valid cron expression: {cron!r} (5 fields, or 6 with seconds last)",
            where="--cron",
        )
    return cron


def slots_between(cron: str, after: datetime, until: datetime) -> list[datetime]:
    """Slot times t with after < t <= until (UTC), oldest first, at most MAX_SLOTS_PER_TICK
    (the most recent ones)."""
    it = croniter(cron, after)
    out: list[datetime] = []
    while True:
        t = it.get_next(datetime)
        if t > until:
            return out[-MAX_SLOTS_PER_TICK:]
        out.append(t)


def add_schedule(
    conn: psycopg.Connection[Any],
    name: str,
    cron: str,
    spec: RunSpec,
    spec_path: str | None = None,
) -> None:
    cron = check_cron(cron)
    if not name or len(name) > 200:
        raise SpecError("a schedule name must be 1 to 200 characters", where="--name")
    literal = literal_secrets(spec.target)
    if literal:
        # the schedule keeps the spec redacted: a value written in it could not be sent later
        raise SpecError(
            f"{', '.join(literal)} would be stored redacted and could not be sent when the "
            "schedule fires; give each value by reference (headers_env) or declare it public "
            "(public_headers, public_query)",
            where="target",
        )
    try:
        conn.execute(
            "INSERT INTO schedules (name, cron, spec, spec_path, last_checked) "
            "VALUES (%s, %s, %s, %s, now())",
            (name, cron, Jsonb(spec.public_dict()), spec_path),
        )
    except psycopg.errors.UniqueViolation:
        raise SpecError(f"a schedule named {name!r} exists already", where="--name") from None


def remove_schedule(conn: psycopg.Connection[Any], name: str) -> bool:
    return (
        conn.execute("DELETE FROM schedules WHERE name = %s RETURNING 1", (name,)).fetchone()
        is not None
    )


def list_schedules(
    conn: psycopg.Connection[Any], now: datetime | None = None
) -> list[dict[str, Any]]:
    """Every schedule with its next slot, last fired slot (and that run's status), and its
    missed slots (count and the latest few)."""
    now = now or datetime.now(UTC)
    rows = conn.execute(
        """
        SELECT s.name, s.cron, s.enabled, s.spec->>'name', s.last_checked,
               (SELECT max(slot) FROM schedule_slots x WHERE x.name = s.name AND state = 'fired'),
               (SELECT r.status FROM schedule_slots x JOIN runs r ON r.run_id = x.run_id
                 WHERE x.name = s.name AND x.state = 'fired' ORDER BY x.slot DESC LIMIT 1),
               (SELECT count(*) FROM schedule_slots x WHERE x.name = s.name AND state = 'missed'),
               (SELECT coalesce(array_agg(slot ORDER BY slot DESC), '{}') FROM
                  (SELECT slot FROM schedule_slots x WHERE x.name = s.name AND state = 'missed'
                    ORDER BY slot DESC LIMIT 5) m),
               (SELECT count(*) FROM schedule_slots x WHERE x.name = s.name AND state = 'failed')
          FROM schedules s ORDER BY s.name
        """
    ).fetchall()
    out = []
    for r in rows:
        out.append(
            {
                "name": r[0],
                "cron": r[1],
                "enabled": r[2],
                "spec_name": r[3],
                "next_slot": croniter(r[1], now).get_next(datetime),
                "last_fired": r[5],
                "last_run_status": r[6],
                "missed": int(r[7]),
                "missed_recent": list(r[8]),
                "failed": int(r[9]),
            }
        )
    return out


def tick(
    conn: psycopg.Connection[Any],
    launch: Callable[[str, RunSpec, str], None],
    *,
    now: datetime | None = None,
    owner: str | None = None,
) -> list[SlotOutcome]:
    """Claim every slot due since each schedule's last check. A slot within LATE_GRACE_S of
    `now` fires: its run row is created (`launch(run_id, spec, name)`); an older one is recorded
    missed. Safe to call from many processes at once."""
    now = now or datetime.now(UTC)
    owner = owner or f"{socket.gethostname()}:{os.getpid()}"
    scheds = conn.execute(
        "SELECT name, cron, spec, coalesce(last_checked, created_at) FROM schedules "
        "WHERE enabled ORDER BY name"
    ).fetchall()
    outcomes: list[SlotOutcome] = []
    for name, cron, spec_json, last in scheds:
        for slot in slots_between(cron, last, now):
            outcomes.extend(_claim(conn, name, slot, spec_json, now, owner, launch))
        conn.execute(
            "UPDATE schedules SET last_checked = greatest(last_checked, %s) WHERE name = %s",
            (now, name),
        )
    return outcomes


def _claim(
    conn: psycopg.Connection[Any],
    name: str,
    slot: datetime,
    spec_json: dict[str, Any],
    now: datetime,
    owner: str,
    launch: Callable[[str, RunSpec, str], None],
) -> list[SlotOutcome]:
    late = now - slot > timedelta(seconds=LATE_GRACE_S)
    state = "missed" if late else "fired"
    run_id = None if late else str(uuid.uuid4())
    detail = f"found {int((now - slot).total_seconds())} s late (scheduler down?)" if late else None
    won = conn.execute(
        "INSERT INTO schedule_slots (name, slot, state, run_id, claimed_by, detail) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name, slot) DO NOTHING RETURNING 1",
        (name, slot, state, run_id, owner, detail),
    ).fetchone()
    if won is None:
        return []  # another scheduler claimed this slot
    if late:
        log.warning("schedule %s: slot %s missed (%s)", name, slot.isoformat(), detail)
        return [SlotOutcome(name, slot, "missed", None)]
    assert run_id is not None
    try:
        spec = spec_from_dict(spec_json, where=f"schedule {name}")
        launch(run_id, spec, name)
    except Exception as exc:
        log.exception("schedule %s: slot %s failed to launch", name, slot.isoformat())
        conn.execute(
            "UPDATE schedule_slots SET state = 'failed', detail = %s WHERE name = %s AND slot = %s",
            (f"{type(exc).__name__}: {exc}"[:500], name, slot),
        )
        return [SlotOutcome(name, slot, "failed", run_id)]
    log.info("schedule %s: slot %s fired run %s", name, slot.isoformat(), run_id)
    return [SlotOutcome(name, slot, "fired", run_id)]


def create_scheduled_run(
    conn: psycopg.Connection[Any], run_id: str, spec: RunSpec, name: str
) -> None:
    """The run row of a fired slot (status pending); the control worker plans and starts it."""
    from loadgen.engine.schedule import static_levels
    from workers.coordinator import store_runs_levels
    from workers.store import runs as store_runs

    store_runs.create_run(conn, run_id, spec, mode="distributed", schedule_name=name)
    store_runs_levels(conn, run_id, static_levels(spec.load))


class PgScheduler(beat.Scheduler):  # type: ignore[misc]
    """A Celery beat scheduler whose only state is in PostgreSQL: every TICK_S it claims due
    slots (creating their runs and sending `peakload.start_run` to the control queue) and
    interrupts shards whose lease expired."""

    def setup_schedule(self) -> None:
        pass

    def tick(self, *args: Any, **kwargs: Any) -> float:
        from workers.app import SCHEDULER_QUEUE, TASK_START_RUN
        from workers.coordinator import reap_and_finalize
        from workers.store.connect import connect_store

        def launch(run_id: str, spec: RunSpec, name: str) -> None:
            create_scheduled_run(conn, run_id, spec, name)
            self.app.send_task(TASK_START_RUN, args=[run_id], queue=SCHEDULER_QUEUE)

        try:
            with connect_store(autocommit=True) as conn:
                tick(conn, launch)
                reap_and_finalize(conn)
        except Exception:
            log.exception("schedule tick failed; retrying in %.0f s", TICK_S)
        return TICK_S
