"""`peakload run --processes N`: a local run's shards spread over N measuring processes (spawned,
never forked), each with its own event loop, stamps, self-check and store writer, started at one
monotonic instant and anchored to one wall time; they meet between levels in the parent's
`GroupPool` (workers/proc_pool.py). The parent (workers/local.py) keeps the run row and lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from loadgen.checks import admission
from loadgen.engine.livemetrics import MULTIPROC_ENV
from loadgen.engine.plan import ShardPlan
from loadgen.engine.runner import ShardResult
from loadgen.errors import CapacityError, RunFailed
from loadgen.results.records import Tick
from loadgen.runspec.spec import RunSpec
from workers.measuring_process import ChildConfig, child_main
from workers.planner import plan_run, with_fraction_offsets
from workers.proc_pool import GroupPool, put, take
from workers.sample_pool import wait_bound_s

MIN_STREAMS_PER_PROCESS = 64  # the default never gives a process fewer streams than this
OPEN_LOOP_STREAM_S = 10.0  # open loop: a request's typical time in flight, for that default
READY_WAIT_S = 120.0  # spawning, importing and warming up, per process at most
STOP_GRACE_S = 5.0  # after an abort, how long a process may take to hand in its result
END_MARGIN_S = 60.0  # beyond the run's planned duration before its processes are stopped
POLL_S = 0.05


def default_processes(spec: RunSpec) -> int:
    """The cores this process may use, but no more processes than the load has streams for
    (MIN_STREAMS_PER_PROCESS each): a small run stays in one process."""
    load = spec.load
    if load.concurrency is not None:
        streams = max(load.concurrency)
    elif load.trace is not None:
        streams = admission.needs_of(spec, with_fraction_offsets(plan_run(spec, "-"))).streams
    else:
        peak = max(load.rate or [0.0])
        if load.ramp is not None:
            peak = max(load.ramp.from_rate, load.ramp.to_rate)
        if load.saturation is not None:
            peak = load.saturation.max
        streams = min(load.max_concurrency, math.ceil(peak * OPEN_LOOP_STREAM_S))
    return max(1, min(len(os.sched_getaffinity(0)), streams // MIN_STREAMS_PER_PROCESS))


def plan_processes(spec: RunSpec, run_id: str, processes: int) -> list[list[ShardPlan]]:
    """The run's plans (planner.plan_run) split over `processes` groups, shard i in group
    i mod N. A spec with fewer shards than processes gets more workers per region, one region
    after another, so every process has a shard of its own."""
    shards = sum(r.workers for r in spec.regions)
    workers = {r.name: r.workers for r in spec.regions}
    names = [r.name for r in spec.regions]
    for i in range(max(0, processes - shards)):
        workers[names[i % len(names)]] += 1
    plans = with_fraction_offsets(plan_run(spec, run_id, workers_per_region=workers))
    return [plans[k::processes] for k in range(processes) if plans[k::processes]]


def admit_machine(
    spec: RunSpec, groups: Sequence[Sequence[ShardPlan]], cap: admission.Capacity | None = None
) -> list[admission.Needs]:
    """Admission for the whole machine: each process's streams and file descriptors against the
    per-process limits, and the memory of all of them against what is available."""
    admission.check_inputs(spec)
    cap = cap or admission.Capacity.of_host()
    needs = [admission.needs_of(spec, g) for g in groups]
    for k, n in enumerate(needs):
        admission.check_capacity(n, cap, f"measuring process {k}")
    memory = sum(n.memory_bytes for n in needs)
    streams = sum(n.streams for n in needs)
    if cap.memory_bytes is not None and memory > cap.memory_bytes * admission.MEMORY_HEADROOM:
        raise CapacityError(
            f"load: refused before starting: {len(needs)} measuring processes holding {streams:,} "
            f"streams need about {memory / 2**30:,.1f} GiB of memory where "
            f"{cap.memory_bytes / 2**30:,.1f} GiB is available"
        )
    fds, free = sum(n.fds for n in needs), _free_system_fds()
    if free is not None and fds > free:
        raise CapacityError(
            f"load: refused before starting: {len(needs)} measuring processes need {fds:,} file "
            f"descriptors where the system has {free:,} free (fs.file-max)"
        )
    return needs


def _free_system_fds() -> int | None:
    try:
        allocated, _, most = Path("/proc/sys/fs/file-nr").read_text().split()[:3]
        return int(most) - int(allocated)
    except (OSError, ValueError):
        return None


@dataclass(slots=True)
class GroupResult:
    results: list[ShardResult]
    lost: dict[str, str]  # shard id -> why its process handed in nothing
    writer_errors: list[str]
    labels: dict[str, str]  # shard id -> "measuring process k"


class ProcessGroup:
    """The measuring processes of one run, from spawning to the last one reaped."""

    def __init__(
        self,
        groups: list[list[ShardPlan]],
        database_url: str,
        tpw: float,
        *,
        metrics_dir: str | None = None,
    ) -> None:
        self.groups = groups
        self.metrics_dir = metrics_dir
        self.url, self.tpw = database_url, tpw
        self.ids = [[p.shard_id for p in g] for g in groups]
        spec = groups[0][0].run_spec()
        self.pool = GroupPool([s for ids in self.ids for s in ids], wait_bound_s(spec))
        self.procs: list[BaseProcess] = []
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.ready = [asyncio.Event() for _ in groups]
        self.gone = [asyncio.Event() for _ in groups]
        self.errors: dict[int, str] = {}
        self.results: dict[int, tuple[list[ShardResult], str | None]] = {}
        self.on_tick: Callable[[Tick], None] | None = None
        self._dir = tempfile.mkdtemp(prefix="peakload-run-")  # 0700: this user's only
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def spawn(self, on_tick: Callable[[Tick], None] | None) -> None:
        self.on_tick = on_tick
        path = str(Path(self._dir) / "ctl.sock")
        self._server = await asyncio.start_unix_server(self._serve, path)
        ctx = multiprocessing.get_context("spawn")  # never fork a process with a loop, threads
        pooled = sum(len(i) for i in self.ids) > 1
        plans = [[p.to_json() for p in g] for g in self.groups]
        with _environment(MULTIPROC_ENV, self.metrics_dir), _no_main_for_children():
            for k, g in enumerate(plans):
                cfg = ChildConfig(k, path, g, self.url, self.tpw, pooled, self.metrics_dir)
                proc = ctx.Process(target=child_main, args=(cfg,), name=f"peakload-measure-{k}")
                proc.start()
                self.procs.append(proc)
        self._spawn_task(self._watch())

    async def wait_ready(self) -> None:
        """Every process warmed up and waiting for the start; RunFailed naming the first that
        failed, died or took longer than READY_WAIT_S."""
        end = time.monotonic() + READY_WAIT_S
        while not all(e.is_set() for e in self.ready):
            for k in range(len(self.groups)):
                if k in self.errors:
                    raise RunFailed("", f"measuring process {k}: {self.errors[k]}")
                if self.gone[k].is_set() and not self.ready[k].is_set():
                    raise RunFailed("", f"measuring process {k} {self._death(k)} while warming up")
            if time.monotonic() > end:
                raise RunFailed("", f"measuring processes not ready within {READY_WAIT_S:.0f} s")
            await asyncio.sleep(POLL_S)

    async def run(
        self, start_mono: int, anchor: tuple[int, int], abort: asyncio.Event
    ) -> GroupResult:
        """Start every process at `start_mono` (anchor: one (wall, mono) pair for all), relay
        an abort, and collect each one's results until all are in or gone."""
        for w in self.writers.values():
            put(w, "start", start_mono, anchor)
        from workers.shard_exec import planned_duration_s

        planned = max(planned_duration_s(g[0]) for g in self.groups)
        end = (
            time.monotonic()
            + planned
            + END_MARGIN_S
            + max(0, start_mono - time.perf_counter_ns()) / 1e9
        )
        stop_by: float | None = None
        while not all(e.is_set() for e in self.gone):
            now = time.monotonic()
            if stop_by is None and (abort.is_set() or now > end):
                for w in self.writers.values():
                    put(w, "abort")
                stop_by = now + STOP_GRACE_S
            if stop_by is not None and now > stop_by:
                self.kill()
                stop_by = now + STOP_GRACE_S
            await asyncio.sleep(POLL_S)
        return self._collect()

    def _collect(self) -> GroupResult:
        out = GroupResult([], {}, [], {})
        for k, ids in enumerate(self.ids):
            for sid in ids:
                out.labels[sid] = f"measuring process {k}"
            got = self.results.get(k)
            if got is None:
                for sid in ids:
                    out.lost[sid] = f"measuring process {k} {self._death(k)}"
                continue
            out.results.extend(got[0])
            if got[1] is not None:
                out.writer_errors.append(f"measuring process {k}: {got[1]}")
        return out

    def _death(self, k: int) -> str:
        proc = self.procs[k] if k < len(self.procs) else None
        if proc is not None:
            proc.join(1.0)
        code = proc.exitcode if proc is not None else None
        if code is None:
            return "stopped answering"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"died (pid {proc.pid}, {signal.Signals(-code).name})" if proc else "died"
        return f"exited with code {code} before handing in its result"

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()

    async def close(self) -> None:
        """Every process ended (killed if it must be) and reaped; the socket removed."""
        end = time.monotonic() + STOP_GRACE_S
        while any(p.is_alive() for p in self.procs) and time.monotonic() < end:
            await asyncio.sleep(POLL_S)
        self.kill()
        for proc in self.procs:
            await asyncio.to_thread(proc.join, STOP_GRACE_S)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
        for w in self.writers.values():
            w.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)

    async def _watch(self) -> None:
        """A process that exits before it ever connects is gone too."""
        while True:
            for k, proc in enumerate(self.procs):
                if proc.exitcode is not None and k not in self.writers:
                    self.gone[k].set()
            await asyncio.sleep(POLL_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        k = -1
        try:
            hello = await take(reader)
            k = int(hello[1])
            self.writers[k] = writer
            while True:
                msg = await take(reader)
                kind = msg[0]
                if kind == "tick" and self.on_tick is not None:
                    self.on_tick(msg[1])
                elif kind == "pool":
                    self._spawn_task(self._pool(writer, *msg[1:]))
                elif kind == "ready":
                    self.ready[k].set()
                elif kind == "result":
                    self.results[k] = (msg[1], msg[2])
                elif kind == "error":
                    self.errors[k] = str(msg[1])
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if k >= 0:
                if k not in self.results:
                    self.pool.lost(self.ids[k])
                self.gone[k].set()

    async def _pool(
        self, writer: asyncio.StreamWriter, run: int, sid: str, samples: dict[str, list[float]]
    ) -> None:
        pooled = await self.pool.pool(run, sid, samples)
        put(writer, "pooled", run, sid, pooled)


@contextlib.contextmanager
def _no_main_for_children() -> Iterator[None]:
    """Spawned children that do not run the parent's `__main__` again: multiprocessing's spawn
    re-imports it in every child (as `__mp_main__`), and in a Streamlit server (a run from the
    Launch page) or a test process it is a page script, which would run in each measuring
    process. Everything a child runs lives in workers/measuring_process.py, so it needs none of
    `__main__`."""
    real = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, no __spec__
    try:
        yield
    finally:
        if real is not None:
            sys.modules["__main__"] = real


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` (if not None) inside the block, as it was after."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
