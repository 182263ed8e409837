"""One shard on one worker, as plain functions a Celery task (or a test) calls: claim the lease,
build the target, check in (warm-up probes, clock offset), wait for the coordinated start,
`run_shard` on an asyncio loop, flush, mark the shard's final state. Never raises for a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from loadgen.checks import admission
from loadgen.engine.levels import wake_offset_ns
from loadgen.engine.livemetrics import LiveMetrics, MetricsSink
from loadgen.engine.plan import ShardPlan
from loadgen.engine.runner import ShardResult, run_shard
from loadgen.engine.runtime import run_measurement
from loadgen.engine.scrubbing import ScrubbingSink
from loadgen.engine.timer import wake_at
from loadgen.runspec.secrets import resolve_target, secret_values
from loadgen.targets.factory import build_target, paced_by
from loadgen.targets.policy import policy_from_env
from workers import leases, runctl
from workers.clocks import ClockEstimate, redis_clock
from workers.control import ShardControl
from workers.metrics_serve import process_metrics
from workers.probes import probe_network
from workers.sample_pool import pool_for, pooled, wait_bound_s
from workers.server_metrics import SCRAPER_KEY, MetricsRecorder
from workers.store.connect import pg_connect
from workers.store.embedded import data_home
from workers.store.runs import level_row
from workers.store.writer import StoreWriter, WriterConfig

if TYPE_CHECKING:
    from loadgen.engine.shard import Shard

log = logging.getLogger(__name__)
T = TypeVar("T")

READY_WAIT_S = 300.0  # how long a checked-in shard waits for the coordinator's start time
SOFT_LIMIT_GRACE_S = 20.0  # the runner stops this long before the soft limit, to flush
DB_RETRY_S = 300.0  # how long the final bookkeeping retries through a store outage
POOL_CONNECT_S = 1.0  # how long a shard waits for its sample pool's Redis before the start
POOL_LEAVE_S = 2.0  # how long a shard that stopped early tries to tell its sample pool so
# how long after its start a shard tells the store it is running: past the instant at which
# every shard of a host wakes, before its first tick
MARK_RUNNING_AFTER_S = 0.25


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Where this worker finds things; from the environment by default."""

    database_url: str
    redis_url: str
    target_override: str | None = None  # region-specific base URL (e.g. a latency proxy)
    metrics_port: int | None = None  # live metrics (workers.metrics_serve); 0: a free port
    metrics_host: str = "127.0.0.1"
    lease_ttl_s: float = leases.LEASE_TTL_S
    owner: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    @classmethod
    def from_env(cls) -> WorkerSettings:
        from workers.app import redis_url
        from workers.store.connect import database_url

        return cls(
            database_url=database_url(),
            redis_url=redis_url(),
            target_override=os.environ.get("PEAKLOAD_TARGET_OVERRIDE") or None,
            lease_ttl_s=float(os.environ.get("PEAKLOAD_LEASE_TTL_S", leases.LEASE_TTL_S)),
            metrics_port=_port_or_none(os.environ.get("PEAKLOAD_METRICS_PORT")),
            metrics_host=os.environ.get("PEAKLOAD_METRICS_HOST") or "127.0.0.1",
        )


def _port_or_none(text: str | None) -> int | None:
    """PEAKLOAD_METRICS_PORT: unset or empty is None; anything but a port is logged and off."""
    if not text or not text.strip():
        return None
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        log.warning("PEAKLOAD_METRICS_PORT=%r is not a port: live metrics off", text)
        return None
    return port


def planned_duration_s(plan: ShardPlan) -> float:
    """Seconds the shard's runner may take: every level (warm-up and cool-down included), plus
    one request deadline to drain stragglers after each level that waits for them."""
    spec = plan.run_spec()
    if spec.load.saturation is not None:  # each tried load may run 1 + max_extensions times
        sat = spec.load.saturation
        runs = sat.max_steps * (1 + sat.max_extensions)
        # plus one wait for a shard that never hands in (the pool stops expecting it after)
        return runs * (spec.load.duration_s + spec.target.deadline_s) + wait_bound_s(spec)
    levels = max(1, int(plan.extra.get("levels", 1)))
    if spec.load.between_levels == "overlap":
        return levels * spec.load.duration_s + spec.target.deadline_s
    waits = levels * (spec.load.duration_s + spec.target.deadline_s)  # drain waits after each
    return waits + (wait_bound_s(spec) if pooled(plan) else 0.0)


def warm_connections(plan: ShardPlan) -> int:
    """Connections to open before check-in (loadgen.checks.admission's rule, as local runs use
    it)."""
    return admission.warm_connections(plan.run_spec(), plan)


def execute_shard(
    plan: ShardPlan,
    settings: WorkerSettings,
    *,
    soft_limit_s: float | None = None,
    tokens_per_word: float = 1.0,
) -> dict[str, Any]:
    """Run one shard at most once. Returns a small JSON-safe report (no secrets)."""
    received_mono = time.perf_counter_ns()
    conn = pg_connect(settings.database_url, autocommit=True)
    try:
        lease = leases.claim_shard(
            conn,
            plan.run_id,
            plan.shard_id,
            settings.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            ttl_s=settings.lease_ttl_s,
        )
        if lease is None:
            state = leases.shard_state(conn, plan.run_id, plan.shard_id)
            log.warning(
                "shard %s/%s refused: already %s (a redelivered or duplicated task)",
                plan.run_id,
                plan.shard_id,
                state,
            )
            return {"shard_id": plan.shard_id, "refused": True, "state": state}
        control = ShardControl(settings.database_url, lease, settings.lease_ttl_s)
        control.start()
        deadline = None
        if soft_limit_s is not None:
            grace = min(SOFT_LIMIT_GRACE_S, soft_limit_s * 0.2)
            deadline = received_mono + int((soft_limit_s - grace) * 1e9)
        job = _Job(plan, settings, conn, lease, control, deadline, tokens_per_word)
        try:
            return job.run()
        finally:
            control.stop()
            job.db(lambda c: runctl.finalize_run(c, plan.run_id))
            conn = job.conn
    finally:
        conn.close()


class _Job:
    """The claimed shard: check in, wait for the start, run, flush, record the final state."""

    def __init__(
        self,
        plan: ShardPlan,
        settings: WorkerSettings,
        conn: psycopg.Connection[Any],
        lease: leases.Lease,
        control: ShardControl,
        deadline_mono: int | None,
        tokens_per_word: float,
    ) -> None:
        self.plan, self.settings, self.conn, self.lease = plan, settings, conn, lease
        self.control, self.deadline_mono, self.tpw = control, deadline_mono, tokens_per_word
        self.status = "failed"
        self.reason: str | None = "the runner did not return"
        self.result: ShardResult | None = None
        self.skew_ns: int | None = None
        self.start_mono: int | None = None
        self.wake_ns: int | None = None  # when it woke for the start, after it (levels.py)
        self.shard: Shard | None = None  # the runner's state, read after a stop from outside
        self.live: LiveMetrics | None = None  # this process's live metrics, if served

    def run(self) -> dict[str, Any]:
        spool = data_home() / "spool" / self.plan.run_id / self.plan.shard_id
        writer = StoreWriter(
            self.settings.database_url,
            self.plan.run_id,
            WriterConfig(
                spool_dir=spool,  # one per shard: pool processes of one host never share a spool
                store_content=self.plan.run_spec().store_content,
            ),
        )
        sink: Any = writer
        self.live = process_metrics(self.settings.metrics_port, self.settings.metrics_host)
        if self.live is not None:  # fed the batches the store is, off the event loop
            sink = MetricsSink(sink, self.live)
        try:
            run_measurement(self._main(sink))
        except BaseException as exc:  # SoftTimeLimitExceeded lands here if the deadline missed
            from celery.exceptions import SoftTimeLimitExceeded

            self.status = "timed_out" if isinstance(exc, SoftTimeLimitExceeded) else "failed"
            self.reason = f"{type(exc).__name__}: {exc}"[:500]
            log.exception("shard %s: %s", self.plan.shard_id, self.reason)
        finally:
            try:
                sink.close()  # flush (or leave a spool to replay): rows written so far are kept
            except Exception as exc:
                self.status = "failed"
                self.reason = f"store flush failed: {type(exc).__name__}: {exc}"[:500]
                log.exception("shard %s: flush failed", self.plan.shard_id)
        return self._finish(writer.stats().counts())

    async def _main(self, sink: Any) -> None:
        plan, spec = self.plan, self.plan.run_spec()
        target_spec = resolve_target(spec.target)  # headers_env from this worker's environment
        # the planned target was checked by the coordinator; an override is where load goes
        # instead: this worker's policy checks it, as the coordinator's checks a spec's target
        policy = None
        if self.settings.target_override:
            policy = policy_from_env()
            target_spec = target_spec.model_copy(
                update={"base_url": self.settings.target_override.rstrip("/")}
            )
        n_conn = warm_connections(plan)
        admission.check_capacity(
            admission.needs_of(spec, [plan]), admission.Capacity.of_host(), f"shard {plan.shard_id}"
        )
        target = build_target(
            target_spec,
            policy,
            max_connections=admission.pool_size(n_conn),
            pacer=paced_by(spec, plan.fraction),  # this shard's share of the provider's limits
        ).sender
        try:
            await target.warm(n_conn)
            net = await asyncio.to_thread(probe_network, target_spec.base_url)
            clock = await asyncio.to_thread(self._clock)
            ready = await asyncio.to_thread(
                leases.mark_ready,
                self.conn,
                self.lease,
                clock_offset_ns=clock.offset_wall_ns,
                clock_uncertainty_ns=clock.uncertainty_ns,
                clock_suspect=clock.suspect,
                network_rtt_ns=net.rtt_ns,
                connect_ns=net.connect_ns,
                extra={
                    "clock_rtt_ns": clock.rtt_ns,
                    "clock_offset_mono_ns": clock.offset_mono_ns,
                    "probe_status": net.status,
                    "probe_error": net.error,
                    "target_overridden": self.settings.target_override is not None,
                    "warm_connections": n_conn,
                    "metrics_url": self.live.url if self.live is not None else None,
                },
            )
            if not ready:
                self.status, self.reason = "interrupted", "fenced out before check-in"
                return
            wake_ns = wake_offset_ns(plan, spec.load)  # for its own first send (levels.py)
            start_ref = await asyncio.to_thread(self.control.wait_for_start, READY_WAIT_S)
            if start_ref is None:
                self.status = "aborted"
                self.reason = self.control.abort_reason or (
                    f"no start time within {READY_WAIT_S:.0f} s of check-in"
                )
                return
            start_mono = clock.ref_to_mono(start_ref)
            self.start_mono = start_mono
            wake_mono, self.wake_ns = start_mono + wake_ns, wake_ns
            abort = asyncio.Event()
            self.control.bind_abort(asyncio.get_running_loop(), abort)
            # everything the start needs is made before it, so that at the instant each shard
            # of a host has nothing to do but note it: a shard busy starting would hold the
            # cores from the others' wake-ups (64 shards on 2 cores: p99 skew 92 ms, 2 ms after)
            recorder = self._scraper(spec.target.metrics_url, clock)
            # the run's shards meet after each level (one search; levels that do not overlap)
            sample_pool = pool_for(plan, self.settings.redis_url, planned_duration_s(plan))
            if sample_pool is not None:
                await sample_pool.connect(POOL_CONNECT_S)
            task = asyncio.create_task(
                run_shard(
                    plan,
                    target,
                    ScrubbingSink(sink, secret_values(target_spec)),
                    start_at_mono_ns=start_mono,
                    begin_at_mono_ns=wake_mono,
                    abort=abort,
                    deadline_mono_ns=self.deadline_mono,
                    tokens_per_word=self.tpw,
                    # wall times (scheduled_at, ticks) on the reference clock, through this
                    # host's measured offset: every region's timeline on one clock, to within
                    # the shard's clock_uncertainty_ns (stored with it)
                    wall_clock=lambda: clock.mono_to_ref(time.perf_counter_ns()),
                    pool=sample_pool,
                    on_shard=self._keep,
                )
            )
            self.skew_ns = await wake_at(wake_mono)  # the runner's set-up runs meanwhile
            # shards due at one instant (a closed loop) wake together: each gives up its core once,
            # so those still waking note it before any starts its work (64 shards on 2 cores:
            # skew p50 3.4-4.1 ms, not 6.0-9.7; bench/RESULTS.md). A no-op on an idle host.
            if hasattr(os, "sched_yield"):
                os.sched_yield()
            # noted, and nothing more at the instant: the store hears of the start a moment
            # later (a database round trip per shard at one instant held the cores from the
            # shards still waking), with the instant the shard noted as its started_at
            marking = asyncio.create_task(
                self._mark_running(self.skew_ns, start_ref + wake_ns + self.skew_ns)
            )
            try:
                self.result = await task
            finally:
                await marking
                if recorder is not None:
                    await recorder.stop()
                if sample_pool is not None:
                    if self.result is None or self.result.status != "completed":
                        # stopped early (a soft time limit, an abort, a deadline): the other
                        # shards need not wait the pool's bound for this one
                        await sample_pool.leave(plan.shard_id, POOL_LEAVE_S)
                    await sample_pool.aclose()
            self.status = _STATUS.get(self.result.status, "failed")
            self.reason = None if self.status == "completed" else f"runner: {self.result.status}"
            if self.status == "aborted" and self.control.abort_reason:
                self.reason = self.control.abort_reason
        finally:
            await target.aclose()

    async def _mark_running(self, skew_ns: int, started_ref_ns: int) -> None:
        await asyncio.sleep(MARK_RUNNING_AFTER_S)
        try:
            await asyncio.to_thread(
                leases.mark_running,
                self.conn,
                self.lease,
                start_skew_ns=skew_ns,
                started_ref_ns=started_ref_ns,
            )
        except psycopg.Error as exc:  # the store is down (D3): recorded again at the end
            log.warning("shard %s: could not mark running: %s", self.plan.shard_id, exc)

    def _keep(self, shard: Shard) -> None:
        self.shard = shard

    def _scraper(self, metrics_url: str | None, clock: ClockEstimate) -> MetricsRecorder | None:
        """The run's one metrics scraper, on the shard the coordinator named (SCRAPER_KEY),
        stamping samples on the reference clock."""
        if not metrics_url or not self.plan.extra.get(SCRAPER_KEY):
            return None
        mono = time.perf_counter_ns()
        recorder = MetricsRecorder(
            self.settings.database_url,
            self.plan.run_id,
            metrics_url,
            (clock.mono_to_ref(mono), mono),
        )
        recorder.start()
        return recorder

    def db(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run `fn` on the control connection, reconnecting through a store outage (D3) for up
        to DB_RETRY_S: the shard's final state must land even if the database blinked."""
        end = time.perf_counter_ns() + int(DB_RETRY_S * 1e9)
        delay = 0.25
        while True:
            try:
                if self.conn.closed or self.conn.broken:
                    self.conn = pg_connect(
                        self.settings.database_url, autocommit=True, connect_timeout=5
                    )
                return fn(self.conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if time.perf_counter_ns() > end:
                    raise
                log.warning("shard %s: store unreachable (%s); retrying", self.plan.shard_id, exc)
                with contextlib.suppress(Exception):
                    self.conn.close()
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _clock(self) -> ClockEstimate:
        return redis_clock(self.settings.redis_url)

    def _finish(self, store: dict[str, int]) -> dict[str, Any]:
        """The shard's final row; `store`: its writer's counts (spooled, replayed, lost)."""
        plan, res = self.plan, self.result
        # stopped before the runner returned (SoftTimeLimitExceeded): the search so far, which
        # the run's answer then names as stopped early (workers.store.searches)
        search = res.search if res else (self.shard.search if self.shard else None)
        written = self.db(lambda c: _count_rows(c, plan))
        self.control.finishing()
        self.db(
            lambda c: leases.finish_shard(
                c,
                self.lease,
                self.status,
                reason=self.reason,
                requests_scheduled=res.requests_scheduled if res else written,
                records_written=written,
                valid=res.valid if res else None,
                invalid_reasons=list(res.invalid_reasons) if res else [],
                extra={
                    "start_mono_ns": self.start_mono,
                    "wake_offset_ns": self.wake_ns,  # started_at = the start + this + the skew
                    "outcomes": dict(res.outcomes) if res else {},
                    "health": dict(res.health) if res else {},
                    "levels": [level_row(lv) for lv in (res.levels if res else [])],
                    "search": search,
                    "store": store,
                },
                start_skew_ns=self.skew_ns,
            )
        )
        return {
            "shard_id": plan.shard_id,
            "refused": False,
            "state": self.status,
            "reason": self.reason,
            "records_written": written,
            "start_skew_ns": self.skew_ns,
        }


_STATUS = {"completed": "completed", "aborted": "aborted", "timed_out": "timed_out"}


def _count_rows(conn: psycopg.Connection[Any], plan: ShardPlan) -> int:
    row = conn.execute(
        "SELECT count(*) FROM requests WHERE run_id = %s AND shard_id = %s",
        (plan.run_id, plan.shard_id),
    ).fetchone()
    return int(row[0]) if row else 0
