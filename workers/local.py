"""Local mode: the same shard plans a distributed run would make, executed in this process on
one event loop, written through the same store writer. `peakload run` and `peakload demo` use it.

Order matters for "nothing half-written": the spec is validated, the target checked against the
policy and preflighted (reachable, key accepted, streams) before the run exists in the store;
its inputs are read and its load admitted (loadgen.checks.admission) before that too. Once it
exists, the run holds a lease (workers.local_lease) and any failure ends it `failed` with its
reason: it is never left `running`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

from loadgen.checks import admission, hosted
from loadgen.checks.calibrate import calibrate
from loadgen.engine.livemetrics import LiveMetrics, MetricsSink
from loadgen.engine.plan import ShardPlan, Sink
from loadgen.engine.pool import LocalPool
from loadgen.engine.runner import run_shard
from loadgen.engine.runtime import run_measurement
from loadgen.engine.schedule import static_levels
from loadgen.engine.scrubbing import ScrubbingSink
from loadgen.errors import RunFailed
from loadgen.results.records import Tick
from loadgen.runspec.secrets import resolve_target, secret_values
from loadgen.runspec.spec import RunSpec
from loadgen.target import Target
from loadgen.targets import OpenAITarget, TargetPolicy, build_target, policy_from_env
from loadgen.targets.factory import paced_by
from loadgen.targets.preflight import preflight
from workers import local_procs
from workers.local_failure import record_failure
from workers.local_finish import LocalRun, finish_local_run
from workers.local_lease import LocalLease, owner_id, reap_dead_local_runs
from workers.planner import plan_run, with_fraction_offsets
from workers.probes import probe_network
from workers.server_metrics import MetricsRecorder
from workers.store import runs as store_runs
from workers.store.connect import connect_store
from workers.store.connect import database_url as default_database_url
from workers.store.probes import save_probe
from workers.store.runs import level_row
from workers.store.writer import StoreWriter, WriterConfig

START_DELAY_S = 0.5  # time between warm-up and the first scheduled request


warm_connections = admission.warm_connections


def admit_local(spec: RunSpec, processes: int = 1) -> None:
    """The admission check `run_local` makes, for a caller that sends something first (the
    probe): a load this machine cannot hold (in `processes` measuring processes) is refused
    before any request."""
    hosted.guard(spec)
    if processes > 1:
        local_procs.admit_machine(spec, local_procs.plan_processes(spec, "admission", processes))
    else:
        admission.admit(spec, with_fraction_offsets(plan_run(spec, "admission")))


def run_local(
    spec: RunSpec,
    *,
    database_url: str | None = None,
    on_tick: Callable[[Tick], None] | None = None,
    on_started: Callable[[str], None] | None = None,
    schedule_name: str | None = None,
    probe_result: dict[str, Any] | None = None,
    processes: int = 1,
    metrics: LiveMetrics | None = None,
    launched_by: str | None = None,
    preflight: bool = True,
) -> LocalRun:
    """Run `spec` and store everything: in this process, or with `processes` > 1 spread over
    that many measuring processes (workers.local_procs), one run all the same. Raises
    PeakloadError subclasses for bad input (inputs, capacity, policy, preflight, store) before
    anything is written, and RunFailed for a failure after the run row exists (the row then
    says `failed`, and why).
    `probe_result` (a parameter probe, workers.param_probe) is stored with the run; `metrics`
    (a started LiveMetrics) counts every record and tick the store is given (with measuring
    processes, what they count: LiveMetrics.children_dir); `launched_by` names the person who
    started it (ui/people.py picks who that is). `preflight` False: no streaming check and no
    prompt calibration (1 token per word), so the target sees the run's own requests and
    nothing else (as `submit --no-preflight`)."""
    hosted.guard(spec)  # over a provider's limits or max_cost_usd: refused before any work
    run_id = str(uuid.uuid4())
    groups: list[list[ShardPlan]] | None = None
    if processes > 1:
        groups = local_procs.plan_processes(spec, run_id, processes)
        plans = [p for g in groups for p in g]
        local_procs.admit_machine(spec, groups)
    else:
        plans = with_fraction_offsets(plan_run(spec, run_id))
        admission.admit(spec, plans)
    # A local run is started by the operator on their own machine: loopback and private
    # targets are theirs to test. Link-local and metadata addresses stay refused regardless.
    policy = policy_from_env().allowing_private()
    if spec.target.metrics_url:  # the target's own URL: checked where it is built
        policy.check(spec.target.metrics_url)
    return run_measurement(
        _run(
            spec,
            run_id,
            plans,
            policy,
            database_url,
            on_tick,
            on_started,
            schedule_name,
            probe_result,
            groups,
            metrics,
            launched_by,
            preflight,
        )
    )


async def _run(
    spec: RunSpec,
    run_id: str,
    plans: list[ShardPlan],
    policy: TargetPolicy,
    database_url: str | None,
    on_tick: Callable[[Tick], None] | None,
    on_started: Callable[[str], None] | None,
    schedule_name: str | None,
    probe_result: dict[str, Any] | None = None,
    groups: list[list[ShardPlan]] | None = None,
    metrics: LiveMetrics | None = None,
    launched_by: str | None = None,
    check_first: bool = True,
) -> LocalRun:
    # one pacer for the process: the shards of a local run share the provider's limits
    pacer = paced_by(spec, 1.0)
    sending = resolve_target(spec.target)  # holds secrets: only the targets see it
    built = [
        build_target(
            sending,
            policy,
            max_connections=admission.pool_size(warm_connections(spec, p)),
            pacer=pacer,
        )
        for p in (plans[:1] if groups else plans)  # measuring processes build their own
    ]
    # the runners send through the pacer; preflight and calibration are not the run's load
    targets = [b.client for b in built]
    senders = [b.sender for b in built]
    try:
        tpw = 1.0
        if check_first:
            await preflight(targets[0])
            tpw = await calibrate(spec, targets[0], run_id)
        url = database_url or default_database_url()
        conn = connect_store(url)
        reap_dead_local_runs(conn)
        store_runs.create_run(
            conn,
            run_id,
            spec,
            mode="local",
            schedule_name=schedule_name,
            owner=owner_id(),
            launched_by=launched_by,
        )
        if probe_result is not None:
            save_probe(conn, run_id, probe_result)
        abort = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_abort(_reason: str) -> None:
            loop.call_soon_threadsafe(abort.set)

        lease = LocalLease(url, run_id, on_abort)
        lease.start()
        try:
            if groups:
                result = await _measure_in_processes(
                    spec, run_id, groups, conn, url, abort, tpw, on_tick, on_started, metrics
                )
            else:
                result = await _measure(
                    spec,
                    run_id,
                    plans,
                    targets,
                    senders,
                    conn,
                    url,
                    abort,
                    tpw,
                    on_tick,
                    on_started,
                    metrics,
                )
            if result.status == "aborted" and lease.abort_reason:
                store_runs.set_run_status(conn, run_id, "aborted", lease.abort_reason)
            return result
        except BaseException as exc:
            reason = _failure_reason(exc)
            conn, unrecorded = record_failure(conn, url, run_id, reason)
            if unrecorded is not None:
                reason = f"{reason}; {unrecorded}"
                if isinstance(exc, RunFailed):
                    raise RunFailed(run_id, reason) from exc
            if isinstance(exc, Exception) and not isinstance(exc, RunFailed):
                raise RunFailed(run_id, reason) from exc
            raise
        finally:
            lease.stop()
            conn.close()
    finally:
        await asyncio.gather(*(t.aclose() for t in targets), return_exceptions=True)


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, RunFailed):
        return exc.reason
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C) before the load started"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled before it ended"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _register(
    conn: Any,
    run_id: str,
    spec: RunSpec,
    plans: list[ShardPlan],
    on_started: Callable[[str], None] | None,
) -> None:
    store_runs.upsert_levels(conn, run_id, [level_row(lv) for lv in static_levels(spec.load)])
    for p in plans:
        store_runs.upsert_shard(conn, run_id, p.shard_id, p.region, p.slot, p.to_json())
    if on_started is not None:
        on_started(run_id)


async def _network(conn: Any, run_id: str, spec: RunSpec, plans: list[ShardPlan]) -> None:
    """One probe for the machine (every local shard takes the same path): the round trip and
    connection set-up that split TTFT into network and server time per region."""
    net = await asyncio.to_thread(probe_network, spec.target.base_url)
    for p in plans:
        store_runs.set_shard_network(conn, run_id, p.shard_id, net.rtt_ns, net.connect_ns)


def _started(
    conn: Any, run_id: str, spec: RunSpec, plans: list[ShardPlan], url: str
) -> MetricsRecorder | None:
    """The run and its shards `running`; the metrics scraper started if the target has one."""
    store_runs.start_run(conn, run_id)
    for p in plans:
        store_runs.set_shard_state(conn, run_id, p.shard_id, "running")
    if not spec.target.metrics_url:
        return None
    recorder = MetricsRecorder(
        url, run_id, spec.target.metrics_url, (time.time_ns(), time.perf_counter_ns())
    )
    recorder.start()
    return recorder


async def _measure(
    spec: RunSpec,
    run_id: str,
    plans: list[ShardPlan],
    targets: list[OpenAITarget],
    senders: list[Target],
    conn: Any,
    url: str,
    abort: asyncio.Event,
    tpw: float,
    on_tick: Callable[[Tick], None] | None,
    on_started: Callable[[str], None] | None,
    metrics: LiveMetrics | None = None,
) -> LocalRun:
    """From the run row's existence to its end: levels, shards, warm-up, the shards run."""
    _register(conn, run_id, spec, plans, on_started)
    await asyncio.gather(
        *(t.warm(warm_connections(spec, p)) for t, p in zip(targets, plans, strict=True))
    )
    await _network(conn, run_id, spec, plans)
    loop = asyncio.get_running_loop()
    _install_abort(loop, abort)
    start = time.perf_counter_ns() + int(START_DELAY_S * 1e9)
    recorder = _started(conn, run_id, spec, plans, url)
    pool = LocalPool(len(plans)) if len(plans) > 1 else None  # one run: shards meet per level
    writer = StoreWriter(url, run_id, WriterConfig(store_content=spec.store_content))
    sink: Sink = ScrubbingSink(writer, secret_values(targets[0].spec))
    if metrics is not None:  # fed from what the store is given, off the event loop
        sink = MetricsSink(sink, metrics)
    try:
        results = await asyncio.gather(
            *(
                run_shard(
                    p,
                    t,
                    sink,
                    start_at_mono_ns=start,
                    abort=abort,
                    on_tick=on_tick,
                    tokens_per_word=tpw,
                    pool=pool,
                )
                for p, t in zip(plans, senders, strict=True)
            )
        )
    finally:
        _remove_abort(loop)
        if recorder is not None:
            await recorder.stop()
        writer_error = _close_writer(sink)  # closes the writer inside
    return finish_local_run(conn, run_id, spec, results, tpw, writer_error)


async def _measure_in_processes(
    spec: RunSpec,
    run_id: str,
    groups: list[list[ShardPlan]],
    conn: Any,
    url: str,
    abort: asyncio.Event,
    tpw: float,
    on_tick: Callable[[Tick], None] | None,
    on_started: Callable[[str], None] | None,
    metrics: LiveMetrics | None = None,
) -> LocalRun:
    """`_measure` with the shards in measuring processes: each warms its own connections;
    they start at one monotonic instant, and what they hand back is pooled as shards are."""
    plans = [p for g in groups for p in g]
    _register(conn, run_id, spec, plans, on_started)
    counts = metrics.children_dir() if metrics is not None else None
    group = local_procs.ProcessGroup(groups, url, tpw, metrics_dir=counts)
    loop = asyncio.get_running_loop()
    recorder = None
    try:
        await group.spawn(on_tick)
        try:
            await group.wait_ready()
        except RunFailed as exc:
            raise RunFailed(run_id, exc.reason) from None
        await _network(conn, run_id, spec, plans)
        _install_abort(loop, abort)
        start = time.perf_counter_ns() + int(START_DELAY_S * 1e9)
        recorder = _started(conn, run_id, spec, plans, url)
        done = await group.run(start, (time.time_ns(), time.perf_counter_ns()), abort)
    finally:
        _remove_abort(loop)
        if recorder is not None:
            await recorder.stop()
        await group.close()
    error = "; ".join(done.writer_errors) or None
    return finish_local_run(
        conn,
        run_id,
        spec,
        done.results,
        tpw,
        RuntimeError(error) if error else None,
        lost=done.lost,
        labels=done.labels,
    )


def _close_writer(writer: Sink) -> Exception | None:
    try:
        writer.close()
    except Exception as exc:  # reported as the run's failure below, after shard states
        return exc
    return None


def _install_abort(loop: asyncio.AbstractEventLoop, abort: asyncio.Event) -> None:
    """Ctrl-C / SIGTERM stop the run cleanly: in-flight requests become `cancelled` records."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, abort.set)


def _remove_abort(loop: asyncio.AbstractEventLoop) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(sig)
