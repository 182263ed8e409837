"""The coordinator of a distributed run: creates the run and its shard rows, dispatches one task
per shard to its region's queue, waits for every shard to check in (warmed, clock measured), sets
an absolute start on the reference clock, and watches the run to its end. All state is in
PostgreSQL; Redis carries the task messages and answers `TIME`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis
from celery import Celery

from loadgen.checks import hosted
from loadgen.engine.plan import ShardPlan
from loadgen.errors import CoordinationError, SpecError, StoreError
from loadgen.runspec.spec import RunSpec, spec_from_dict
from workers import leases, runctl
from workers.app import TASK_RUN_SHARD, region_queue, shard_time_limits
from workers.clocks import redis_now_ns
from workers.planner import plan_run, with_fraction_offsets
from workers.server_metrics import with_metrics_scraper
from workers.shard_exec import DB_RETRY_S, planned_duration_s

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0  # every shard must check in within this long of dispatch
START_LEAD_S = 2.0  # the start is set this far after the last check-in
PRECHECK_S = 1.0  # readiness is checked again this long before the start
POLL_S = 0.1
# how long a wait for a run's end rides through an unreachable store: as long as the shards,
# spooling meanwhile, retry their final bookkeeping
STORE_OUTAGE_S = DB_RETRY_S


@dataclass(slots=True)
class SubmitOptions:
    workers_per_region: dict[str, int] | None = None
    ready_timeout_s: float = READY_TIMEOUT_S
    start_lead_s: float = START_LEAD_S
    soft_limit_s: float | None = None  # override the limit derived from the planned duration
    preflight: bool = True  # one streaming request + token calibration from this process
    schedule_name: str | None = None
    launched_by: str | None = None  # the person who started the run (deploy/sql/0230)


@dataclass(slots=True)
class Launch:
    run_id: str
    started: bool
    start_at_ref_ns: int | None
    reason: str | None
    plans: list[ShardPlan] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "running" if self.started else "aborted"


class Coordinator:
    def __init__(self, database_url: str, redis_url: str, app: Celery | None = None) -> None:
        from workers.app import app as default_app

        self.database_url = database_url
        self.redis_url = redis_url
        self.app = app or default_app

    @classmethod
    def from_env(cls) -> Coordinator:
        from workers.app import make_app, redis_url
        from workers.store.connect import database_url

        url = redis_url()  # read now, not when workers.app was first imported
        return cls(database_url(), url, make_app(url))

    def _conn(self) -> psycopg.Connection[Any]:
        from workers.store.connect import connect_store

        return connect_store(self.database_url, autocommit=True)

    # ------------------------------------------------------------ create and launch

    def create(self, spec: RunSpec, opts: SubmitOptions) -> tuple[str, list[ShardPlan], float]:
        """Check the target, create the run with its levels and `planned` shards. Returns
        (run_id, plans, tokens_per_word). Raises PeakloadError before writing anything."""
        from loadgen.checks import admission
        from loadgen.engine.schedule import static_levels
        from loadgen.runspec.secrets import literal_secrets
        from loadgen.targets import policy_from_env
        from workers.store import runs as store_runs

        if urlsplit(spec.target.base_url).query:
            # the plan carries the spec to every worker through the broker: a `?key=` there
            # would sit in Redis, task events and the stored spec
            raise SpecError(
                "a query string would travel through the broker to every worker and be stored "
                "with the spec; name keys by api_key_env (headers) instead",
                where="target.base_url",
            )
        literal = literal_secrets(spec.target)
        if literal:
            # plans reach the workers redacted (loadgen.runspec.secrets): a value written in the
            # spec could only travel in the clear, through the broker and task events
            raise SpecError(
                f"{', '.join(literal)} would reach the workers only in the clear; give each "
                'value by reference (headers_env = {Name = "ENV_VAR"}, set on every worker) '
                "or declare it not secret in public_headers",
                where="target.headers",
            )
        hosted.guard(spec)  # over a provider's limits or max_cost_usd: refused before any work
        policy = policy_from_env()  # the workers build the planned target unchecked (shard_exec)
        for url in (spec.target.base_url, spec.target.metrics_url):
            if url:
                policy.check(url)
        run_id = str(uuid.uuid4())
        plans = with_metrics_scraper(
            with_fraction_offsets(
                plan_run(spec, run_id, workers_per_region=opts.workers_per_region)
            ),
            spec.target.metrics_url,
        )
        admission.check_inputs(spec)
        ceiling = admission.Capacity(admission.max_streams_setting(), None, 1 << 30, 1 << 30)
        for p in plans:  # each shard runs in one worker process, on a machine not known here
            admission.check_capacity(admission.needs_of(spec, [p]), ceiling, f"shard {p.shard_id}")
        tpw = _preflight(spec, run_id) if opts.preflight else 1.0
        with self._conn() as conn:
            store_runs.create_run(
                conn,
                run_id,
                spec,
                mode="distributed",
                schedule_name=opts.schedule_name,
                launched_by=opts.launched_by,
            )
            _write_plan(conn, run_id, spec, plans)
            store_runs_levels(conn, run_id, static_levels(spec.load))
        return run_id, plans, tpw

    def dispatch(
        self, plans: list[ShardPlan], *, tokens_per_word: float, opts: SubmitOptions
    ) -> None:
        """One task per shard on its region's queue, with limits from its planned duration."""
        for p in plans:
            soft, hard = shard_time_limits(planned_duration_s(p))
            if opts.soft_limit_s is not None:
                soft, hard = opts.soft_limit_s, opts.soft_limit_s + 60.0
            self.app.send_task(
                TASK_RUN_SHARD,
                args=[p.to_json()],
                kwargs={"soft_limit_s": soft, "tokens_per_word": tokens_per_word},
                queue=region_queue(p.region),
                soft_time_limit=soft,
                time_limit=hard,
                expires=opts.ready_timeout_s + 60.0,
            )

    def submit(self, spec: RunSpec, opts: SubmitOptions | None = None) -> Launch:
        """Create, dispatch and start a run; returns once the start time is set (or the start
        was aborted, with the reason)."""
        opts = opts or SubmitOptions()
        run_id, plans, tpw = self.create(spec, opts)
        self.dispatch(plans, tokens_per_word=tpw, opts=opts)
        launch = self.coordinate_start(run_id, opts)
        launch.plans = plans
        return launch

    def launch_existing(self, run_id: str, opts: SubmitOptions | None = None) -> Launch:
        """Plan, dispatch and start a run whose row exists already (a scheduled run)."""
        opts = opts or SubmitOptions()
        with self._conn() as conn:
            row = conn.execute("SELECT spec FROM runs WHERE run_id = %s", (run_id,)).fetchone()
            if row is None:
                raise CoordinationError(f"run {run_id} does not exist")
            spec = spec_from_dict(row[0], where=f"run {run_id}")
            from loadgen.targets import policy_from_env

            try:
                policy_from_env().check(spec.target.base_url)
            except Exception as exc:
                reason = f"target refused by the policy: {exc}"
                runctl.request_abort(conn, run_id, reason)
                runctl.finalize_run(conn, run_id)
                return Launch(run_id, False, None, reason)

            plans = with_metrics_scraper(
                with_fraction_offsets(plan_run(spec, run_id)), spec.target.metrics_url
            )
            _write_plan(conn, run_id, spec, plans)
        tpw = 1.0
        if opts.preflight:
            try:
                tpw = _preflight(spec, run_id)
            except Exception as exc:
                with self._conn() as conn:
                    runctl.request_abort(conn, run_id, f"preflight failed: {exc}")
                    runctl.finalize_run(conn, run_id)
                return Launch(run_id, False, None, f"preflight failed: {exc}", plans)
        self.dispatch(plans, tokens_per_word=tpw, opts=opts)
        launch = self.coordinate_start(run_id, opts)
        launch.plans = plans
        return launch

    # ------------------------------------------------------------ synchronized start

    def coordinate_start(self, run_id: str, opts: SubmitOptions) -> Launch:
        """Wait for every shard to be `ready`, publish the start, re-check just before it. A
        shard missing at either point aborts the run with a reason naming it (C4)."""
        with self._conn() as conn:
            deadline = time.perf_counter_ns() + int(opts.ready_timeout_s * 1e9)
            while True:
                leases.reap_expired(conn, run_id)
                states = runctl.shard_states(conn, run_id)
                ctl = runctl.read_control(conn, run_id)
                if ctl is not None and ctl.abort_requested:
                    return self._aborted(conn, run_id, ctl.abort_reason or "aborted")
                bad = {s: st for s, st in states.items() if st in leases.TERMINAL_STATES}
                if bad:
                    return self._aborted(
                        conn, run_id, "shard(s) ended before the start: " + _list(bad)
                    )
                if states and all(st == "ready" for st in states.values()):
                    break
                if time.perf_counter_ns() > deadline:
                    missing = {s: st for s, st in states.items() if st != "ready"}
                    return self._aborted(
                        conn,
                        run_id,
                        f"not ready within {opts.ready_timeout_s:g} s: {_list(missing)} "
                        "(no worker on the region's queue, or a worker failed to check in)",
                    )
                time.sleep(POLL_S)
            try:  # through a Redis restart of up to 30 s (C3), as the shards' clocks are
                ref_now = redis_now_ns(self.redis_url)
            except redis.RedisError as exc:
                return self._aborted(conn, run_id, f"reference clock unreachable: {exc}")
            start_ref = ref_now + int(opts.start_lead_s * 1e9)
            if not runctl.set_start(conn, run_id, start_ref):
                ctl = runctl.read_control(conn, run_id)
                reason = (ctl.abort_reason if ctl else None) or "run no longer pending"
                return self._aborted(conn, run_id, reason)
            t_check = time.perf_counter_ns() + int((opts.start_lead_s - PRECHECK_S) * 1e9)
            while time.perf_counter_ns() < t_check:
                time.sleep(POLL_S)
            leases.reap_expired(conn, run_id)
            gone = {
                s: st
                for s, st in runctl.shard_states(conn, run_id).items()
                if st not in ("ready", "running")
            }
            if gone:
                return self._aborted(
                    conn, run_id, f"shard(s) lost just before the start: {_list(gone)}"
                )
            return Launch(run_id, True, start_ref, None)

    def _aborted(self, conn: psycopg.Connection[Any], run_id: str, reason: str) -> Launch:
        log.warning("run %s: start aborted: %s", run_id, reason)
        runctl.request_abort(conn, run_id, reason)
        runctl.finalize_run(conn, run_id)
        return Launch(run_id, False, None, reason)

    # ------------------------------------------------------------ watching

    def wait(
        self,
        run_id: str,
        *,
        on_progress: Callable[[list[dict[str, Any]]], None] | None = None,
        poll_s: float = 0.5,
        timeout_s: float | None = None,
    ) -> str:
        """Block until the run ends; reap dead shards as it goes. Returns the final status.

        The store may go away meanwhile (restarted, a pooler refusing logins while it was
        down): the shards spool and replay, and the wait reconnects and goes on, unless it
        stays unreachable for STORE_OUTAGE_S."""
        end = None if timeout_s is None else time.perf_counter_ns() + int(timeout_s * 1e9)
        conn: psycopg.Connection[Any] | None = None
        lost_since: float | None = None
        try:
            while True:
                try:
                    if conn is None:
                        conn = self._conn()
                    leases.reap_expired(conn, run_id)
                    status = runctl.finalize_run(conn, run_id)
                    progress = region_progress(conn, run_id) if on_progress is not None else None
                except (psycopg.OperationalError, StoreError) as exc:
                    # a dropped connection, or a new one refused or timed out (StoreError)
                    lost_since = self._store_lost(run_id, exc, lost_since)
                    if conn is not None:
                        conn.close()
                        conn = None
                else:
                    if lost_since is not None:
                        log.warning("run %s: the store answers again", run_id)
                        lost_since = None
                    if on_progress is not None and progress is not None:
                        on_progress(progress)
                    if status is not None:
                        return status
                if end is not None and time.perf_counter_ns() > end:
                    raise CoordinationError(f"run {run_id} still running after {timeout_s:g} s")
                time.sleep(poll_s)
        finally:
            if conn is not None:
                conn.close()

    @staticmethod
    def _store_lost(
        run_id: str, exc: psycopg.OperationalError | StoreError, since: float | None
    ) -> float:
        """When the store was first found unreachable (monotonic s); raises once that is
        longer ago than STORE_OUTAGE_S."""
        now = time.monotonic()
        if since is None:
            log.warning("run %s: the store is unreachable (%s); waiting for it", run_id, exc)
            return now
        if now - since > STORE_OUTAGE_S:
            raise CoordinationError(
                f"run {run_id}: the store has been unreachable for {STORE_OUTAGE_S:g} s ({exc})"
            ) from exc
        return since


def abort_run(
    conn: psycopg.Connection[Any], run_id: str, reason: str, redis_url: str | None = None
) -> bool:
    """Set the abort flag; workers see it within a poll period and stop. A Redis pub/sub
    message is sent as a nudge for listeners; the flag in PostgreSQL is what counts."""
    ok = runctl.request_abort(conn, run_id, reason)
    if ok:
        runctl.finalize_run(conn, run_id)
        if redis_url:
            try:
                with redis.Redis.from_url(redis_url, socket_timeout=2) as r:
                    r.publish(runctl.ABORT_CHANNEL, run_id)
            except redis.RedisError as exc:
                log.info("abort nudge not sent (the flag is set anyway): %s", exc)
    return ok


def reap_and_finalize(conn: psycopg.Connection[Any]) -> list[str]:
    """Interrupt every expired lease, then end the runs that have no active shard left."""
    reaped = leases.reap_expired(conn)
    ended = []
    for run_id in sorted({r for r, _ in reaped}):
        if runctl.finalize_run(conn, run_id) is not None:
            ended.append(run_id)
    return ended


def region_progress(conn: psycopg.Connection[Any], run_id: str) -> list[dict[str, Any]]:
    """Per region: shards by state, and from the ticks, requests started/completed/errors,
    output tokens, in flight now (latest tick of each shard)."""
    rows = conn.execute(
        """
        WITH t AS (
            SELECT region, shard_id, sum(started) AS started, sum(completed) AS completed,
                   sum(errors) AS errors, sum(output_tokens) AS tokens,
                   (array_agg(in_flight ORDER BY t DESC))[1] AS in_flight
              FROM ticks WHERE run_id = %(r)s GROUP BY region, shard_id
        )
        SELECT s.region, count(*) AS shards,
               jsonb_object_agg(s.shard_id, s.state) AS states,
               coalesce(sum(t.started), 0), coalesce(sum(t.completed), 0),
               coalesce(sum(t.errors), 0), coalesce(sum(t.tokens), 0),
               coalesce(sum(t.in_flight), 0)
          FROM shards s LEFT JOIN t ON t.shard_id = s.shard_id
         WHERE s.run_id = %(r)s GROUP BY s.region ORDER BY s.region
        """,
        {"r": run_id},
    ).fetchall()
    return [
        {
            "region": r[0],
            "shards": int(r[1]),
            "states": dict(r[2]),
            "started": int(r[3]),
            "completed": int(r[4]),
            "errors": int(r[5]),
            "output_tokens": int(r[6]),
            "in_flight": int(r[7]),
        }
        for r in rows
    ]


def _list(states: dict[str, str]) -> str:
    return ", ".join(f"{s} ({st})" for s, st in sorted(states.items()))


def _write_plan(
    conn: psycopg.Connection[Any], run_id: str, spec: RunSpec, plans: list[ShardPlan]
) -> None:
    from workers.store import runs as store_runs

    for p in plans:
        store_runs.upsert_shard(conn, run_id, p.shard_id, p.region, p.slot, p.to_json())
    conn.execute("UPDATE runs SET shards_expected = %s WHERE run_id = %s", (len(plans), run_id))


def store_runs_levels(conn: psycopg.Connection[Any], run_id: str, levels: list[Any]) -> None:
    from workers.store import runs as store_runs

    store_runs.upsert_levels(
        conn,
        run_id,
        [store_runs.level_row(lv) for lv in levels],
    )


def _preflight(spec: RunSpec, run_id: str) -> float:
    """One streaming request and the token calibration, from the coordinator's host; returns
    tokens per synthetic word. Raises PreflightError with the reason."""
    from loadgen.checks.calibrate import calibrate
    from loadgen.runspec.secrets import resolve_target
    from loadgen.targets import build_target
    from loadgen.targets.preflight import preflight

    async def go() -> float:
        # the caller (create, launch_existing) has checked the policy for this URL
        target = build_target(resolve_target(spec.target), None, max_connections=2).client
        try:
            await preflight(target)
            return await calibrate(spec, target, run_id)
        finally:
            await target.aclose()

    return asyncio.run(go())
