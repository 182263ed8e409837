"""Admission: what is checked about a spec before a run exists anywhere. Its inputs load (the
trace and the dataset, read in full) and would send something; the load fits this process: the
streams held at once, the memory they take and the file descriptors their connections need,
against the per-process ceiling, the memory available and `ulimit -n`. A load that does not fit
is refused with those numbers, before a task is created or a connection opened.
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.checks.session_memory import BYTES_PER_TOKEN, session_bytes
from loadgen.engine.plan import ShardPlan
from loadgen.engine.schedule import trace_share
from loadgen.engine.traces import trace_entries
from loadgen.engine.workload import load_dataset
from loadgen.errors import CapacityError, SpecError
from loadgen.runspec.load_spec import LoadSpec
from loadgen.runspec.spec import RunSpec

ENV_MAX_STREAMS = "PEAKLOAD_MAX_STREAMS_PER_PROCESS"
DEFAULT_MAX_STREAMS = 16_384
# Marginal memory of one open stream at saturation, 1,024 streams (bench/RESULTS.md, generator
# bench: 64 KiB; 35-55 KiB below saturation), and what a measuring process holds before any.
STREAM_BYTES = 64 * 1024
BASE_BYTES = 160 * 1024 * 1024
BASE_FDS = 64  # store connections, the writer, logs, the event loop's own
MEMORY_HEADROOM = 0.8  # never plan to take more than this share of what is available
OPEN_LOOP_WARM = 64  # open loop: a rate's concurrency depends on the server, unknown yet


def warm_connections(spec: RunSpec, plan: ShardPlan) -> int:
    """Connections worth opening before the start: the busiest level's users (capped by
    `max_concurrency`), or for open loop a modest pool."""
    if plan.users_per_level:
        return max(1, min(max(plan.users_per_level), plan.in_flight_cap()))
    return max(1, min(OPEN_LOOP_WARM, plan.in_flight_cap()))


def pool_size(warm: int) -> int:
    """The connection pool of a shard that warms `warm` connections: room for replacing each
    (a server that closes after every response) and a few for stragglers."""
    return warm * 2 + 8


def shard_streams(spec: RunSpec, plan: ShardPlan, trace_times: np.ndarray | None = None) -> int:
    """Streams (requests in flight, or closed-loop users) one shard may hold at once: the
    users of its busiest level, or for open loop its rate times the request deadline (every
    request as slow as allowed), for a trace its lines in its busiest deadline-long window;
    open loop capped by the shard's share of `max_concurrency`. `trace_times`: the trace's
    line times, when the caller has read it already."""
    load = spec.load
    if load.concurrency is not None:
        return max(plan.users_per_level, default=0)
    if load.rate is not None:
        peak = max(load.rate)
    elif load.ramp is not None:
        peak = max(load.ramp.from_rate, load.ramp.to_rate)
    elif load.saturation is not None:
        peak = load.saturation.max
    else:
        assert load.trace is not None
        times = trace_times if trace_times is not None else _trace_times(load)
        return min(plan.in_flight_cap(), _busiest_window(spec, plan, times))
    in_flight = math.ceil(peak * plan.fraction * spec.target.deadline_s)
    return max(1, min(plan.in_flight_cap(), in_flight))


def _trace_times(load: LoadSpec) -> np.ndarray:
    return np.asarray([e.t_s for e in trace_entries(load)], dtype=float)


def _busiest_window(spec: RunSpec, plan: ShardPlan, times: np.ndarray) -> int:
    """The most of this shard's trace lines (loadgen.engine.schedule.trace_share) sent inside the
    run's duration whose send times fall in one request deadline: at most that many in flight."""
    lo = float(plan.extra.get("fraction_lo", 0.0))
    mine = np.sort(times[trace_share(len(times), spec.load.seed, lo, lo + plan.fraction)])
    mine = mine[mine < spec.load.duration_s]
    if mine.size == 0:
        return 0
    ends = np.searchsorted(mine, mine + spec.target.deadline_s, side="left")
    return int((ends - np.arange(mine.size)).max())


@dataclass(frozen=True, slots=True)
class Needs:
    """What a set of shards run in one process needs at its peak."""

    streams: int
    connections: int
    session_bytes: int = 0  # what each stream's multi-turn session holds at its last turn

    @property
    def memory_bytes(self) -> int:
        return BASE_BYTES + self.streams * (STREAM_BYTES + self.session_bytes)

    @property
    def fds(self) -> int:
        return BASE_FDS + self.connections


@dataclass(frozen=True, slots=True)
class Capacity:
    """What this process may use: the ceiling on streams, memory available (None if unknown)
    and the open-file limits (soft, hard)."""

    max_streams: int
    memory_bytes: int | None
    fd_soft: int
    fd_hard: int

    @classmethod
    def of_host(cls, environ: Mapping[str, str] | None = None) -> Capacity:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        inf = resource.RLIM_INFINITY
        return cls(
            max_streams_setting(environ),
            available_memory_bytes(),
            1 << 30 if soft == inf else soft,
            1 << 30 if hard == inf else hard,
        )


def max_streams_setting(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    raw = env.get(ENV_MAX_STREAMS, "").strip()
    if not raw:
        return DEFAULT_MAX_STREAMS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise CapacityError(f"{ENV_MAX_STREAMS} must be a positive integer, got {raw!r}")
    return value


def available_memory_bytes() -> int | None:
    """MemAvailable, or less if this process's cgroup allows less; None where neither is known."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = Path("/sys/fs/cgroup/memory.current").read_text().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int(used)))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def needs_of(spec: RunSpec, plans: Sequence[ShardPlan]) -> Needs:
    """The peak of `plans` run together in one process. Closed-loop levels run one after
    another, so streams are the busiest level's users summed over the shards."""
    if spec.load.concurrency is not None:
        levels = len(spec.load.concurrency)
        streams = max(
            (sum(p.users_per_level[i] for p in plans if i < len(p.users_per_level)))
            for i in range(levels)
        )
    else:
        times = _trace_times(spec.load) if spec.load.trace else None
        streams = sum(shard_streams(spec, p, times) for p in plans)
    connections = sum(pool_size(warm_connections(spec, p)) for p in plans)
    return Needs(streams, connections, session_bytes(spec.workload))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"  # pragma: no cover


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**15 else f"{n:.3g}"


def check_capacity(needs: Needs, cap: Capacity, where: str) -> None:
    """Raise CapacityError naming every limit `needs` exceeds, with the numbers. Raises the
    soft open-file limit towards the hard one when that is all it takes."""
    problems = []
    if needs.streams > cap.max_streams:
        problems.append(
            f"{_count(needs.streams)} streams at once is over the per-process ceiling of "
            f"{cap.max_streams:,} (set {ENV_MAX_STREAMS} to raise it, or spread the load "
            "over more regions or workers)"
        )
    mem = needs.memory_bytes
    if cap.memory_bytes is not None and mem > cap.memory_bytes * MEMORY_HEADROOM:
        per = f"{STREAM_BYTES // 1024} KiB per stream"
        if needs.session_bytes:
            per = (
                f"({per} + {_size(needs.session_bytes)} of session history at the last turn: "
                f"{needs.session_bytes // BYTES_PER_TOKEN:,} tokens x {BYTES_PER_TOKEN} bytes)"
            )
        problems.append(
            f"they need about {_size(mem)} of memory ({_count(needs.streams)} x {per} + "
            f"{_size(BASE_BYTES)}) where {_size(cap.memory_bytes)} is available"
        )
    if needs.fds > cap.fd_hard:
        problems.append(
            f"their connections need {_count(needs.fds)} file descriptors where ulimit -n "
            f"allows at most {cap.fd_hard:,} (hard limit)"
        )
    if problems:
        raise CapacityError(f"{where}: refused before starting: " + "; ".join(problems))
    if needs.fds > cap.fd_soft:
        raise_fd_limit(needs.fds, cap.fd_hard)


def raise_fd_limit(wanted: int, hard: int) -> None:
    """Lift this process's soft RLIMIT_NOFILE to `wanted` (at most the hard limit)."""
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    except (OSError, ValueError) as exc:
        raise CapacityError(
            f"the run needs {wanted:,} file descriptors and ulimit -n could not be raised to "
            f"it: {exc}"
        ) from None


def check_inputs(spec: RunSpec) -> None:
    """Read the dataset and the trace in full, as the run would, and refuse a trace that
    would send nothing. Raises SpecError naming the file and line."""
    if spec.workload.dataset:
        load_dataset(spec.workload.dataset)
    trace = spec.load.trace
    if trace:
        entries = trace_entries(spec.load)
        inside = sum(1 for e in entries if e.t_s < spec.load.duration_s)
        if inside == 0:
            raise SpecError(
                f"every one of its {len(entries):,} lines has t >= load.duration_s "
                f"({spec.load.duration_s:g} s; the first is at t = {entries[0].t_s:g} s): "
                "nothing would be sent. Lengthen duration_s, shift the trace's times or set "
                "load.trace_start_s / trace_speedup",
                where=trace,
            )


def admit(
    spec: RunSpec,
    plans: Sequence[ShardPlan],
    *,
    capacity: Capacity | None = None,
    where: str | None = None,
) -> Needs:
    """Everything checked before a run row is written: inputs, then this process's capacity
    for `plans` run together. Returns the needs (for messages and tests)."""
    check_inputs(spec)
    needs = needs_of(spec, plans)
    if where is None:
        load = spec.load
        model = next(
            (n for n in ("concurrency", "rate", "ramp", "trace", "saturation") if getattr(load, n)),
            "",
        )
        where = f"load.{model}" if model else "load"
    check_capacity(needs, capacity or Capacity.of_host(), where)
    return needs
