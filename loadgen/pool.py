"""Where the shards of one run meet after each level: each hands in its samples (possibly none)
and waits for every other shard's, so shards start their next level together and a saturation
search decides on everyone's samples. `LocalPool` serves shards in one event loop (local mode).
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class SamplePool(Protocol):
    """Where the shards of one search meet after each level run (`run` counts from 0)."""

    async def pool(
        self, run: int, shard_id: str, samples: dict[str, list[float]]
    ) -> dict[str, list[float]]:
        """Hand in this shard's samples of level run `run`; wait for every shard's; return them
        all, pooled (concatenated in shard-id order, the same for every shard)."""
        ...


class LocalPool:
    """A `SamplePool` for `shards` shards running in one event loop."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self._got: dict[int, dict[str, dict[str, list[float]]]] = {}
        self._full: dict[int, asyncio.Event] = {}

    async def pool(
        self, run: int, shard_id: str, samples: dict[str, list[float]]
    ) -> dict[str, list[float]]:
        got = self._got.setdefault(run, {})
        full = self._full.setdefault(run, asyncio.Event())
        got[shard_id] = samples
        if len(got) >= self.shards:
            full.set()
        await full.wait()
        out: dict[str, list[float]] = {}
        for sid in sorted(got):
            for name, vals in got[sid].items():
                out.setdefault(name, []).extend(vals)
        return out
