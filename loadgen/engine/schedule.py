"""Load profiles as pure data: the levels of a run and, for open-loop levels, every request's
absolute send offset. Offsets are seconds from the level's start; they are never accumulated
sleeps, so sleep overshoot cannot drift the schedule.

Arrival processes are built by time-rescaling a unit-rate process: draw unit-rate arrival
points u_1 < u_2 < ... (constant: u_i = i; Poisson: cumulative Exp(1); gamma: cumulative
Gamma(k, 1/k), coefficient of variation 1/sqrt(k)) and map each through the inverse of the
cumulative rate Λ(t), so a ramp is the same code as a constant rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.errors import SpecError
from loadgen.runspec.jsonl import jsonl_rows
from loadgen.runspec.load_spec import LoadSpec


@dataclass(frozen=True, slots=True)
class Level:
    """One step of the load profile. `value` is users (closed loop) or requests/s for the
    whole run (open loop, before this shard's fraction); `kind` names which."""

    index: int
    kind: str  # concurrency | rate | ramp | trace
    value: float
    duration_s: float
    warmup_s: float
    cooldown_s: float
    ramp_to: float | None = None  # ramp: the rate at the end of the level


@dataclass(frozen=True, slots=True)
class TraceEntry:
    t_s: float
    prompt_tokens: int | None
    output_tokens: int | None
    # a Mooncake trace's hash ids: the prompt's blocks in order, the same id the same text
    prefix_blocks: tuple[int, ...] = ()


def static_levels(load: LoadSpec) -> list[Level]:
    """The levels known before the run (a saturation search adds its levels as it goes)."""
    common = {
        "duration_s": load.duration_s,
        "warmup_s": load.warmup_s,
        "cooldown_s": load.cooldown_s,
    }
    if load.concurrency is not None:
        return [Level(i, "concurrency", float(c), **common) for i, c in enumerate(load.concurrency)]
    if load.rate is not None:
        return [Level(i, "rate", float(r), **common) for i, r in enumerate(load.rate)]
    if load.ramp is not None:
        return [Level(0, "ramp", load.ramp.from_rate, ramp_to=load.ramp.to_rate, **common)]
    if load.trace is not None:
        return [Level(0, "trace", 0.0, **common)]
    return []


def search_level(load: LoadSpec, index: int, rate: float) -> Level:
    """A saturation search's `index`-th level, at `rate` requests/s (the run's, before shares)."""
    return Level(index, "rate", rate, load.duration_s, load.warmup_s, load.cooldown_s)


def unit_gaps(arrival: str, burstiness: float, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` gaps of a unit-rate arrival process (mean 1)."""
    if arrival == "constant":
        return np.ones(n, dtype=np.float64)
    if arrival == "poisson":
        return rng.exponential(1.0, size=n)
    if arrival == "gamma":
        return rng.gamma(burstiness, 1.0 / burstiness, size=n)
    raise SpecError(f"unknown arrival process {arrival!r}", where="load.arrival")


def open_loop_offsets(
    arrival: str,
    burstiness: float,
    rate_start: float,
    rate_end: float,
    duration_s: float,
    seed: int,
    max_requests: int,
    phase: float = 0.0,
) -> Iterator[float]:
    """Send offsets (s from the level start) for a rate going linearly from `rate_start` to
    `rate_end` requests/s over `duration_s`; at most `max_requests`. The first request goes at
    unit time `phase` (in [0, 1): 0 is the level's start): a shard's fraction's low end, so
    the N equal shards of a constant rate interleave into the run's one lattice (shard k at
    k/R, N/R + k/R, ...) instead of sending N requests at once every N/R seconds, and the
    shards of a Poisson or gamma process do not all send their first request at 0. Generated
    in blocks so a long run never holds its whole schedule in memory."""
    if not 0.0 <= phase < 1.0:
        raise ValueError(f"phase must be in [0, 1), not {phase}")
    rng = np.random.default_rng(seed)
    a = rate_start
    b = (rate_end - rate_start) / duration_s
    total = a * duration_s + b * duration_s * duration_s / 2  # Λ(duration)
    made = 0
    x = phase
    while made < max_requests:
        n = min(4096, max_requests - made)
        gaps = unit_gaps(arrival, burstiness, rng, n)
        points = x + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        x = float(points[-1] + gaps[-1])
        for u in points.tolist():
            if u >= total:
                return
            yield _invert_cumulative_rate(u, a, b)
        made += n


def _invert_cumulative_rate(x: float, a: float, b: float) -> float:
    """Solve Λ(t) = a t + b t^2 / 2 = x for t >= 0."""
    if abs(b) < 1e-12:
        return x / a
    disc = a * a + 2.0 * b * x
    return (-a + math.sqrt(max(disc, 0.0))) / b


def load_trace(path: str) -> list[TraceEntry]:
    """A trace: JSONL of {"t": seconds from start, "prompt_tokens"?: n, "output_tokens"?: m}."""
    entries: list[TraceEntry] = []
    p = Path(path)
    for lineno, row in jsonl_rows(p):
        try:
            t = float(row["t"])
        except (KeyError, TypeError, ValueError):
            raise SpecError(f'line {lineno}: needs a number "t" (seconds)', where=str(p)) from None
        if not (t >= 0 and math.isfinite(t)):
            raise SpecError(f'line {lineno}: "t" must be >= 0', where=str(p))
        entries.append(
            TraceEntry(
                t,
                _opt_int(row, "prompt_tokens", p, lineno),
                _opt_int(row, "output_tokens", p, lineno),
            )
        )
    if not entries:
        raise SpecError("trace is empty", where=str(p))
    entries.sort(key=lambda e: e.t_s)
    return entries


def _opt_int(row: dict[str, object], key: str, p: Path, lineno: int) -> int | None:
    v = row.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or v < 1:
        raise SpecError(f'line {lineno}: "{key}" must be a positive integer', where=str(p))
    return v


def trace_share(n: int, seed: int, lo: float, hi: float) -> np.ndarray:
    """Indices of trace lines that belong to the shard owning the fraction interval [lo, hi).

    Every shard draws the same uniform number per line (same seed), so the shards partition
    the trace exactly, in proportion to their fractions."""
    u = np.random.default_rng([seed, 0x7A]).random(n)
    return np.nonzero((u >= lo) & (u < hi))[0]


def saturation_levels(
    start: float, maximum: float, met: list[tuple[float, bool]], max_steps: int, tolerance: float
) -> float | None:
    """The next level to try in a saturation search, or None when it is done.

    Doubles from `start` until a level misses the SLOs (or `maximum` is reached), then bisects
    between the highest level that met and the lowest that missed until their ratio is within
    `tolerance`. `met` is the history of (level, met_slos)."""
    if len(met) >= max_steps:
        return None
    if not met:
        return start
    good = [v for v, ok in met if ok]
    bad = [v for v, ok in met if not ok]
    if not bad:
        last = met[-1][0]
        if last >= maximum:
            return None
        return min(last * 2.0, maximum)
    hi = min(bad)
    lo = max((v for v in good if v < hi), default=None)
    if lo is None:
        lo_try = hi / 2.0
        return lo_try if lo_try >= start / 16 else None
    if (hi - lo) / hi <= tolerance:
        return None
    return (lo + hi) / 2.0
