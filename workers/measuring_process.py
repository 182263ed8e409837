"""One measuring process of `peakload run --processes N` (workers/local_procs.py spawns them): it
connects back to the parent's socket, builds its targets and store writer, waits for the common
start, runs its shards on its own event loop and hands in their results. Everything a spawned
child runs lives here, so it needs nothing of the parent's `__main__`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import time
from dataclasses import dataclass
from typing import Any

from loadgen.checks import admission
from loadgen.engine.plan import ShardPlan
from workers.proc_pool import ChildPool, put, take


@dataclass(frozen=True, slots=True)
class ChildConfig:
    index: int
    socket_path: str
    plans: list[dict[str, Any]]  # ShardPlan.to_json()
    database_url: str
    tokens_per_word: float
    pooled: bool
    metrics_dir: str | None = None  # live metrics: count into this folder's files


def child_main(cfg: ChildConfig) -> None:
    """A measuring process: ends with its parent; Ctrl-C reaches it through the parent."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from loadgen.engine.runtime import run_measurement

    run_measurement(_child(cfg))


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan if the parent is killed


async def _child(cfg: ChildConfig) -> None:
    from loadgen.engine.runner import run_shard

    reader, writer = await asyncio.open_unix_connection(cfg.socket_path)
    put(writer, "hello", cfg.index)
    plans = [ShardPlan.from_json(d) for d in cfg.plans]
    abort = asyncio.Event()
    start: asyncio.Future[tuple[int, tuple[int, int]] | None] = (
        asyncio.get_running_loop().create_future()
    )
    pool = ChildPool(writer) if cfg.pooled else None
    listener = asyncio.create_task(_listen(reader, abort, start, pool))
    try:
        try:
            targets = await _targets(cfg, plans)
            sink, store = _sink(cfg, plans)  # connected before the start, not after it
        except Exception as exc:
            put(writer, "error", f"{type(exc).__name__}: {exc}")
            await writer.drain()
            return
        try:
            put(writer, "ready")
            began = await start
            if began is None:  # aborted before the start: nothing was sent
                with contextlib.suppress(Exception):
                    store.close()
                return
            start_mono, (wall0, mono0) = began
            results = await asyncio.gather(
                *(
                    run_shard(
                        p,
                        t.sender,
                        sink,
                        start_at_mono_ns=start_mono,
                        abort=abort,
                        on_tick=lambda tick: put(writer, "tick", tick),
                        tokens_per_word=cfg.tokens_per_word,
                        pool=pool,
                        wall_clock=lambda: wall0 + (time.perf_counter_ns() - mono0),
                    )
                    for p, t in zip(plans, targets, strict=True)
                )
            )
            writer_error = None
            try:
                store.close()
            except Exception as exc:
                writer_error = f"{type(exc).__name__}: {exc}"
            put(writer, "result", list(results), writer_error)
            await writer.drain()
        finally:
            await asyncio.gather(*(t.client.aclose() for t in targets), return_exceptions=True)
    finally:
        listener.cancel()
        writer.close()


async def _targets(cfg: ChildConfig, plans: list[ShardPlan]) -> list[Any]:
    from loadgen.runspec.secrets import resolve_target
    from loadgen.targets import build_target, policy_from_env
    from loadgen.targets.factory import paced_by

    spec = plans[0].run_spec()
    # its own limits (the soft open-file limit is raised here, for this process)
    admission.check_capacity(
        admission.needs_of(spec, plans),
        admission.Capacity.of_host(),
        f"measuring process {cfg.index}",
    )
    policy = policy_from_env().allowing_private()
    sending = resolve_target(spec.target)
    pacer = paced_by(spec, sum(p.fraction for p in plans))  # its share of a provider's limits
    built = [
        build_target(
            sending,
            policy,
            max_connections=admission.pool_size(admission.warm_connections(spec, p)),
            pacer=pacer,
        )
        for p in plans
    ]
    await asyncio.gather(
        *(
            b.client.warm(admission.warm_connections(spec, p))
            for b, p in zip(built, plans, strict=True)
        )
    )
    return built


def _sink(cfg: ChildConfig, plans: list[ShardPlan]) -> tuple[Any, Any]:
    from loadgen.engine.scrubbing import ScrubbingSink
    from loadgen.runspec.secrets import resolve_target, secret_values
    from workers.store.embedded import data_home
    from workers.store.writer import StoreWriter, WriterConfig

    spec = plans[0].run_spec()
    run_id = plans[0].run_id
    spool = data_home() / "spool" / run_id / f"process-{cfg.index}"  # one spool per writer
    store = StoreWriter(
        cfg.database_url,
        run_id,
        WriterConfig(spool_dir=spool, store_content=spec.store_content),
    )
    sink: Any = ScrubbingSink(store, secret_values(resolve_target(spec.target)))
    if cfg.metrics_dir is not None:
        from loadgen.engine.livemetrics import LiveMetrics, MetricsSink, counts_to_files

        if counts_to_files():  # spawned with the folder named: counted where the parent reads
            sink = MetricsSink(sink, LiveMetrics())
            return sink, sink  # closing it closes the writer, then counts the last batch
    return sink, store


async def _listen(
    reader: asyncio.StreamReader,
    abort: asyncio.Event,
    start: asyncio.Future[tuple[int, tuple[int, int]] | None],
    pool: ChildPool | None,
) -> None:
    """The parent's messages; its end (killed, or gone) aborts this process's shards."""
    try:
        while True:
            msg = await take(reader)
            if msg[0] == "start" and not start.done():
                start.set_result((int(msg[1]), msg[2]))
            elif msg[0] == "abort":
                abort.set()
                if not start.done():
                    start.set_result(None)
            elif msg[0] == "pooled" and pool is not None:
                pool.resolve(int(msg[1]), str(msg[2]), msg[3])
    except (asyncio.IncompleteReadError, ConnectionError):
        abort.set()
        if not start.done():
            start.set_result(None)
        if pool is not None:
            pool.parent_gone()
