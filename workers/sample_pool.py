"""A `SamplePool` (loadgen/pool.py) in Redis: the Celery shards of one distributed run meet
there after each level run: a saturation search's shards judge the same pooled samples and run
the same next level; a sweep's shards (under drain or cancel) start each next level together,
once every one has ended its last.

Keys, per run id and level-run index, all expiring after `ttl_s` (longer than the run may last,
so a late shard still finds what the others decided): `…:members` (the shards that handed in),
`…:data` (each one's samples, packed float64) and `…:closed` (the closed set, JSON).

The rule, each step one Lua script (atomic):
- Handing in: if the pool is closed, the shard gets the closed set (its own samples are not in
  it). Otherwise it joins; when the members cover the expected shards — every planned shard for
  the first level run, then those the previous level run's pool closed with (a shard that died
  is waited for once, not at every level) — the pool closes with the members.
- A shard whose wait exceeds the bound (`wait_bound_s`: the level's duration, the request
  deadline and a margin, from its own hand-in) closes the pool with the members present, unless
  it closed meanwhile. The first to close wins (the key is set once).
Every shard, a late one included, then pools exactly the closed set's samples in shard-id order.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import redis.asyncio as aioredis

from loadgen.plan import ShardPlan
from loadgen.pool import Pooled, concat
from loadgen.spec import RunSpec

PREFIX = "peakload:pool"
WAIT_MARGIN_S = 15.0  # beyond duration + deadline: start skew, drains, a slow host
TTL_MARGIN_S = 3600.0  # keys outlive the run's planned duration by this much
POLL_S = 0.02  # how often a waiting shard looks for the closed set

# KEYS: members, data, closed, previous closed. ARGV: shard id, ttl s, planned ids (JSON),
# then metric name / packed samples pairs. Returns the closed set (JSON) or false.
_JOIN = """
local closed = redis.call('GET', KEYS[3])
if closed then return closed end
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[1] .. '\\n' .. ARGV[i], ARGV[i + 1])
end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local prev = redis.call('GET', KEYS[4])
local expected = cjson.decode(prev or ARGV[3])
for _, sid in ipairs(expected) do
  if redis.call('SISMEMBER', KEYS[1], sid) == 0 then return false end
end
local m = redis.call('SMEMBERS', KEYS[1])
table.sort(m)
closed = cjson.encode(m)
redis.call('SET', KEYS[3], closed, 'EX', ARGV[2])
return closed
"""

# KEYS: members, closed. ARGV: ttl s. Closes the pool with its members unless already closed.
_CLOSE = """
local closed = redis.call('GET', KEYS[2])
if closed then return closed end
local m = redis.call('SMEMBERS', KEYS[1])
table.sort(m)
closed = cjson.encode(m)
redis.call('SET', KEYS[2], closed, 'EX', ARGV[1])
return closed
"""


def wait_bound_s(spec: RunSpec) -> float:
    """How long a shard that handed in waits for the others: the level's duration (a shard may
    be a whole level behind at most that), one request deadline (its drain) and a margin."""
    return spec.load.duration_s + spec.target.deadline_s + WAIT_MARGIN_S


def pack(samples: dict[str, list[float]]) -> list[tuple[str, bytes]]:
    """(metric, little-endian float64 bytes) pairs; inf (a miss) survives."""
    return [(k, np.asarray(v, dtype="<f8").tobytes()) for k, v in sorted(samples.items())]


def unpack(raw: bytes) -> list[float]:
    return [float(x) for x in np.frombuffer(raw, dtype="<f8")] if raw else []


class RedisPool:
    """The `SamplePool` of one distributed run: `shard_ids` are all of its planned shards."""

    def __init__(
        self,
        redis_url: str,
        run_id: str,
        shard_ids: Sequence[str],
        *,
        wait_s: float,
        ttl_s: float,
    ) -> None:
        self.url, self.run_id = redis_url, run_id
        self.shard_ids = sorted(shard_ids)
        self.wait_s, self.ttl_s = wait_s, max(1, int(ttl_s))
        self._client: aioredis.Redis | None = None

    def key(self, run: int, part: str) -> str:
        return f"{PREFIX}:{self.run_id}:{run}:{part}"

    def _redis(self) -> aioredis.Redis:
        if self._client is None:  # made on first use: bound to the loop the shard runs on
            self._client = aioredis.Redis.from_url(self.url, socket_timeout=10)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def pool(self, run: int, shard_id: str, samples: dict[str, list[float]]) -> Pooled:
        r = self._redis()
        members, data, closed_key = (self.key(run, p) for p in ("members", "data", "closed"))
        args: list[Any] = [shard_id, self.ttl_s, json.dumps(self.shard_ids)]
        for name, raw in pack(samples):
            args += [name, raw]
        closed = await r.eval(  # type: ignore[misc]
            _JOIN, 4, members, data, closed_key, self.key(run - 1, "closed"), *args
        )
        end = time.monotonic() + self.wait_s
        while not closed and time.monotonic() < end:
            await asyncio.sleep(POLL_S)
            closed = await r.get(closed_key)
        if not closed:
            closed = await r.eval(_CLOSE, 2, members, closed_key, self.ttl_s)  # type: ignore[misc]
        present = [str(s) for s in json.loads(closed)]
        return Pooled(
            concat(await self._samples(r, data, present)),
            tuple(present),
            tuple(s for s in self.shard_ids if s not in present),
        )

    async def _samples(
        self, r: aioredis.Redis, data: str, present: list[str]
    ) -> dict[str, dict[str, list[float]]]:
        """Each present shard's samples, from the data hash (fields "shard\\nmetric")."""
        raw: dict[bytes, bytes] = await r.hgetall(data)  # type: ignore[misc,assignment]
        out: dict[str, dict[str, list[float]]] = {s: {} for s in present}
        for field_b, value in raw.items():
            sid, _, metric = field_b.decode().partition("\n")
            if sid in out and metric:
                out[sid][metric] = unpack(value)
        return out


def pooled(plan: ShardPlan) -> bool:
    """Whether the shards of this plan's run meet after each level: a saturation search (one
    search on everyone's samples), or several levels that drain or cancel between them (each
    next level starts once every shard's last one has ended), with more than one shard."""
    spec = plan.run_spec()
    if len(plan.extra.get("shard_ids") or ()) < 2:
        return False
    if spec.load.saturation is not None:
        return True
    return int(plan.extra.get("levels", 1)) > 1 and spec.load.between_levels != "overlap"


def pool_for(plan: ShardPlan, redis_url: str, planned_s: float) -> RedisPool | None:
    """The run's pool for this shard if its run pools (`pooled`), else None. `planned_s`: how
    long the shard may run (its keys outlive that)."""
    if not pooled(plan):
        return None
    spec = plan.run_spec()
    ids = plan.extra["shard_ids"]
    return RedisPool(
        redis_url,
        plan.run_id,
        [str(s) for s in ids],
        wait_s=wait_bound_s(spec),
        ttl_s=planned_s + TTL_MARGIN_S,
    )
