"""Where the shards of one run meet after each level: each hands in its samples (possibly none)
and waits for every other shard's, so shards start their next level together and a saturation
search decides on everyone's samples. `LocalPool` serves shards in one event loop (local mode);
workers/sample_pool.py's `RedisPool` serves the Celery shards of a distributed run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Pooled:
    """What a level run's pool closed with: the samples of the shards in `shards`, concatenated
    in shard-id order (the same for every shard), and the run's shards whose samples were not
    in when it closed (`missing`: a shard that died, or came too late)."""

    samples: dict[str, list[float]]
    shards: tuple[str, ...]
    missing: tuple[str, ...] = field(default=())
    # when it closed, on the run's reference clock (the wall clock of its shards), where the
    # pool has one: the shards then start their next level at one instant after it
    closed_at_ref_ns: int | None = None

    @property
    def complete(self) -> bool:
        return not self.missing


def concat(by_shard: Mapping[str, Mapping[str, list[float]]]) -> dict[str, list[float]]:
    """Every shard's samples, metric by metric, in shard-id order."""
    out: dict[str, list[float]] = {}
    for sid in sorted(by_shard):
        for name, vals in by_shard[sid].items():
            out.setdefault(name, []).extend(vals)
    return out


class SamplePool(Protocol):
    """Where the shards of one search meet after each level run (`run` counts from 0)."""

    async def pool(self, run: int, shard_id: str, samples: dict[str, list[float]]) -> Pooled:
        """Hand in this shard's samples of level run `run`; wait for every shard's (or, in a
        distributed pool, until the pool closes without some); return what it closed with,
        the same for every shard."""
        ...


class LocalPool:
    """A `SamplePool` for `shards` shards running in one event loop (always complete)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self._got: dict[int, dict[str, dict[str, list[float]]]] = {}
        self._full: dict[int, asyncio.Event] = {}

    async def pool(self, run: int, shard_id: str, samples: dict[str, list[float]]) -> Pooled:
        got = self._got.setdefault(run, {})
        full = self._full.setdefault(run, asyncio.Event())
        got[shard_id] = samples
        if len(got) >= self.shards:
            full.set()
        await full.wait()
        return Pooled(concat(got), tuple(sorted(got)))
