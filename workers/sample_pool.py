"""A `SamplePool` (loadgen/engine/pool.py) in Redis: the Celery shards of one distributed run meet
there after each level run: a saturation search's shards judge the same pooled samples and run
the same next level; a sweep's shards (under drain or cancel) start each next level together,
once every one has ended its last.

Keys, per run id and level-run index, all expiring after `ttl_s` (longer than the run may last,
so a late shard still finds what the others decided): `…:members` (the shards that handed in),
`…:data` (each one's samples, packed float64) and `…:closed` (the closed set and the moment it
closed on Redis's clock, JSON: `{"members": [...], "sec": "...", "usec": "..."}`).

The rule, each step one Lua script (atomic):
- Handing in: if the pool is closed, the shard gets the closed set (its own samples are not in
  it). Otherwise it joins; when the members cover the expected shards — every planned shard for
  the first level run, then those the previous level run's pool closed with (a shard that died
  is waited for once, not at every level) — the pool closes with the members.
- A shard whose wait exceeds the bound (`wait_bound_s`: the level's duration, the request
  deadline and a margin, from its own hand-in) joins again and closes the pool with the members
  present, unless it closed meanwhile. The first to close wins (the key is set once).
Every shard, a late one included, then pools exactly the closed set's samples in shard-id order,
and starts its next level at one instant after the close (`Pooled.closed_at_ref_ns`: Redis's
clock is the run's reference clock, workers/clocks.py), not when it happened to see it.
- A shard that stops early and knows it (Celery's soft time limit, an abort, a deadline, an
  error its loop survived) leaves: it is listed in the run's `…:left` set, which counts as handed
  in for every pool from then on, and the pool it would have joined next closes at once if the
  rest are in. The others go on without waiting the bound for it (a shard killed outright
  cannot leave: that one is waited for once, as above).
A lost connection (Redis restarting) is retried up to the bound; if Redis lost the keys, the
closing shard's own samples are in again, and the closed set says who else was.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from loadgen.engine.plan import ShardPlan
from loadgen.engine.pool import Pooled, concat
from loadgen.runspec.spec import RunSpec

if TYPE_CHECKING:  # imported where a pool is used: a local run needs no Redis client
    import redis.asyncio as aioredis

log = logging.getLogger(__name__)
T = TypeVar("T")

PREFIX = "peakload:pool"
WAIT_MARGIN_S = 15.0  # beyond duration + deadline: start skew, drains, a slow host
TTL_MARGIN_S = 3600.0  # keys outlive the run's planned duration by this much
# A waiting shard blocks on the pool's `…:go` list, which the closing shard fills with one item
# per planned shard, so each waiter wakes when the pool closes, not at its next poll (64 shards
# polling every 20 ms took a core's third, and saw the close up to 0.6 s apart). The block ends
# after WAKE_S at most, to look at the closed set (Redis restarted and lost the list) and the
# bound.
WAKE_S = 1.0

# KEYS: members, data, closed, previous closed, go, left (the run's). ARGV: shard id, ttl s,
# planned ids (JSON), mode ("0": hand in; "1": hand in and close now, with whoever is in; "2":
# leave), then metric name / packed samples pairs. Returns the closed set (JSON list) or false
# while it stays open.
_JOIN = """
if ARGV[4] == '2' then
  redis.call('SADD', KEYS[6], ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[2])
end
local closed = redis.call('GET', KEYS[3])
if closed then return closed end
if ARGV[4] == '2' then
  if redis.call('SCARD', KEYS[1]) == 0 then return false end
else
  for i = 5, #ARGV, 2 do
    redis.call('HSET', KEYS[2], ARGV[1] .. '\\n' .. ARGV[i], ARGV[i + 1])
  end
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
if ARGV[4] ~= '1' then
  local prev = redis.call('GET', KEYS[4])
  local expected = prev and cjson.decode(prev)['members'] or cjson.decode(ARGV[3])
  for _, sid in ipairs(expected) do
    if redis.call('SISMEMBER', KEYS[1], sid) == 0 and redis.call('SISMEMBER', KEYS[6], sid) == 0
    then return false end
  end
end
local m = redis.call('SMEMBERS', KEYS[1])
table.sort(m)
local now = redis.call('TIME')
closed = cjson.encode({members = m, sec = now[1], usec = now[2]})
redis.call('SET', KEYS[3], closed, 'EX', ARGV[2])
for _ = 1, #cjson.decode(ARGV[3]) do redis.call('RPUSH', KEYS[5], '1') end
redis.call('EXPIRE', KEYS[5], ARGV[2])
return closed
"""


async def _wake(r: aioredis.Redis, *, go: str, timeout_s: float) -> None:
    """Block until the pool's go list has an item (it closed) or `timeout_s` passes."""
    await r.blpop([go], timeout=timeout_s)  # type: ignore[misc]


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
        self._next_run = 0  # the level run this shard would hand in next

    def key(self, run: int, part: str) -> str:
        return f"{PREFIX}:{self.run_id}:{run}:{part}"

    def _redis(self) -> aioredis.Redis:
        if self._client is None:  # made on first use: bound to the loop the shard runs on
            import redis.asyncio as aioredis

            self._client = aioredis.Redis.from_url(self.url, socket_timeout=10)
        return self._client

    async def connect(self, timeout_s: float) -> None:
        """Open the connection now, before the run starts, rather than on the first pool: at
        the end of the first level every shard of a host would otherwise connect at once.
        Best effort: if Redis does not answer within `timeout_s`, the first pool retries."""
        from redis import exceptions as redis_errors

        with contextlib.suppress(TimeoutError, redis_errors.RedisError, OSError):
            await asyncio.wait_for(self._redis().ping(), timeout_s)  # type: ignore[arg-type]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _keys(self, run: int) -> list[str]:
        """The script's KEYS for level run `run` (see _JOIN)."""
        here = [self.key(run, p) for p in ("members", "data", "closed")]
        return [*here, self.key(run - 1, "closed"), self.key(run, "go"), self._left_key()]

    def _left_key(self) -> str:
        return f"{PREFIX}:{self.run_id}:left"

    async def leave(self, shard_id: str, timeout_s: float) -> None:
        """This shard hands in no more: the others stop waiting for it (the pool it would have
        joined next closes now if everyone else is in). Best effort within `timeout_s`: if Redis
        does not answer, the others wait the bound, as for a shard that died."""
        from redis import exceptions as redis_errors

        args: list[Any] = [shard_id, self.ttl_s, json.dumps(self.shard_ids), "2"]
        keys = self._keys(self._next_run)
        try:
            await asyncio.wait_for(self._redis().eval(_JOIN, 6, *keys, *args), timeout_s)
        except (TimeoutError, redis_errors.RedisError, OSError) as exc:
            log.warning("sample pool: could not leave run %s's pool (%s)", self.run_id, exc)

    async def pool(self, run: int, shard_id: str, samples: dict[str, list[float]]) -> Pooled:
        self._next_run = run + 1
        keys = self._keys(run)
        _, data, closed_key, _, go, _ = keys
        args: list[Any] = [shard_id, self.ttl_s, json.dumps(self.shard_ids), "0"]
        for name, raw in pack(samples):
            args += [name, raw]
        end = time.monotonic() + self.wait_s
        closed = await self._retry(lambda r: r.eval(_JOIN, 6, *keys, *args), end)
        while not closed and (left := end - time.monotonic()) > 0:
            await self._retry(partial(_wake, go=go, timeout_s=min(WAKE_S, max(left, 0.01))), end)
            closed = await self._retry(lambda r: r.get(closed_key), end)
        if not closed:  # the bound: close with whoever is in (this shard too, if Redis forgot)
            args[3] = "1"
            closed = await self._retry(lambda r: r.eval(_JOIN, 6, *keys, *args), None)
        closing = json.loads(closed)
        listed = closing["members"]
        present = [str(x) for x in listed] if isinstance(listed, list) else []  # {} = empty
        by_shard = await self._retry(lambda r: self._samples(r, data, present), None)
        return Pooled(
            concat(by_shard),
            tuple(present),
            tuple(x for x in self.shard_ids if x not in present),
            closed_at_ref_ns=int(closing["sec"]) * 1_000_000_000 + int(closing["usec"]) * 1000,
        )

    async def _retry(self, op: Callable[[aioredis.Redis], Awaitable[T]], end: float | None) -> T:
        """`op` on the client, again after a lost connection (Redis restarting) until `end`
        (monotonic s) or, for the steps after the bound, for one more `wait_s`."""
        from redis import exceptions as redis_errors

        stop = end if end is not None else time.monotonic() + self.wait_s
        delay = 0.1
        while True:
            try:
                return await op(self._redis())
            except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
                if time.monotonic() >= stop:
                    raise RuntimeError(
                        f"sample pool of run {self.run_id}: Redis unreachable ({exc})"
                    ) from exc
                log.warning("sample pool: Redis unreachable (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

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
