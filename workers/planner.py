"""The planner: a pure function splitting a `RunSpec` into one `ShardPlan` per (region, worker
slot). No I/O, no clock, no randomness beyond the spec's seeds: the same spec and run id always
give the same plans, so local mode and the distributed coordinator agree shard for shard.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction

from loadgen.engine.plan import ShardPlan
from loadgen.errors import SpecError
from loadgen.runspec.spec import RunSpec

_MASK64 = (1 << 64) - 1


def level_count(spec: RunSpec) -> int:
    """How many load levels the spec declares up front (1 for ramp, trace and saturation: a
    saturation search decides its levels while it runs, one at a time)."""
    if spec.load.concurrency is not None:
        return len(spec.load.concurrency)
    if spec.load.rate is not None:
        return len(spec.load.rate)
    return 1


def split_largest_remainder(total: int, weights: Sequence[Fraction]) -> list[int]:
    """Split the integer `total` in proportion to `weights` (which add up to 1) so the parts add
    up to `total` exactly: floors first, then one more to the largest remainders (ties go to the
    earlier index, so the split is deterministic)."""
    if total < 0:
        raise ValueError(f"cannot split a negative total ({total})")
    quotas = [total * w for w in weights]
    parts = [int(q) for q in quotas]  # Fraction -> floor for non-negative values
    short = total - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - parts[i]), i))
    for i in order[:short]:
        parts[i] += 1
    return parts


def shard_seed(spec: RunSpec, index: int) -> int:
    """A 64-bit seed for shard `index`, from the load and workload seeds.

    splitmix64's finaliser is a bijection on 64-bit integers, so distinct shard indexes of one
    run always get distinct seeds, and the same spec always gets the same seeds.
    """
    base = (spec.load.seed * 0x9E3779B97F4A7C15 + spec.workload.seed * 0xBF58476D1CE4E5B9) & _MASK64
    z = (base + index) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _slots(spec: RunSpec, workers_per_region: Mapping[str, int] | None) -> list[tuple[str, int]]:
    names = [r.name for r in spec.regions]
    overrides = dict(workers_per_region or {})
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise SpecError(
            f"unknown region(s) {unknown}; the spec declares {names}", where="workers_per_region"
        )
    out: list[tuple[str, int]] = []
    for region in spec.regions:
        n = overrides.get(region.name, region.workers)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SpecError(
                f"region {region.name!r} needs at least one worker (got {n!r})",
                where="workers_per_region",
            )
        out.extend((region.name, slot) for slot in range(n))
    return out


def plan_run(
    spec: RunSpec, run_id: str, *, workers_per_region: dict[str, int] | None = None
) -> list[ShardPlan]:
    """One shard per (region, worker slot), in spec order, ids `"{region}-{slot}"`.

    Each shard's `fraction` is its region's share divided by the region's worker count (the
    runner multiplies open-loop rates by it). Closed-loop users of every level,
    `load.max_requests` and `load.max_concurrency` are split by the largest-remainder method
    over those fractions, so the shards of a level add up exactly to the configured count.
    `workers_per_region` overrides each region's `workers` field.
    """
    if not run_id:
        raise SpecError("a run id is required", where="plan_run")
    slots = _slots(spec, workers_per_region)
    shares = {r.name: Fraction(r.share).limit_denominator(10**9) for r in spec.regions}
    per_region = {name: sum(1 for n, _ in slots if n == name) for name in shares}
    weights = [shares[name] / per_region[name] for name, _ in slots]
    total_weight = sum(weights, Fraction(0))
    weights = [w / total_weight for w in weights]  # exact sum of 1 despite float shares

    levels = level_count(spec)
    users: list[list[int]] = [[] for _ in slots]
    if spec.load.concurrency is not None:
        for count in spec.load.concurrency:
            for i, part in enumerate(split_largest_remainder(count, weights)):
                users[i].append(part)
    max_requests = split_largest_remainder(spec.load.max_requests, weights)
    # `max_concurrency` caps the run's requests in flight: each shard holds its share (at
    # least one), so the run's cap does not grow with its regions, workers or processes
    caps = split_largest_remainder(spec.load.max_concurrency, weights)

    public = spec.public_dict()
    ids = [f"{region}-{slot}" for region, slot in slots]
    plans: list[ShardPlan] = []
    for i, (region, slot) in enumerate(slots):
        plans.append(
            ShardPlan(
                run_id=run_id,
                shard_id=ids[i],
                region=region,
                slot=slot,
                fraction=float(weights[i]),
                seed=shard_seed(spec, i),
                users_per_level=users[i],
                max_requests=max_requests[i],
                spec=public,
                extra={
                    "shard_index": i,
                    "shards_total": len(slots),
                    "shard_ids": ids,  # every shard of the run (they meet in a sample pool)
                    "workers_in_region": per_region[region],
                    "levels": levels,
                    "max_concurrency": max(1, caps[i]),
                },
            )
        )
    return plans


def with_fraction_offsets(plans: list[ShardPlan]) -> list[ShardPlan]:
    """Give each shard the start of its slice of [0, 1) (trace replay partitions by it)."""
    out, lo = [], 0.0
    for p in plans:
        out.append(dataclasses.replace(p, extra={**p.extra, "fraction_lo": lo}))
        lo += p.fraction
    return out
