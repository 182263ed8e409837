"""How the measuring processes of one local run talk to the process that started them: framed
pickles over a private Unix socket (`put`, `take`), and the run's sample pool across processes
(`GroupPool` in the parent, `ChildPool` in each child), the same `SamplePool` rule as Redis.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterable, Sequence
from typing import Any

from loadgen.engine.pool import Pooled, concat

_HEADER = 8  # little-endian byte count before each pickle

Message = tuple[Any, ...]


def frame(msg: Message) -> bytes:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_HEADER, "little") + data


def put(writer: asyncio.StreamWriter, *msg: Any) -> None:
    """Queue one message (the socket is the run's own, between its own processes)."""
    if not writer.is_closing():
        writer.write(frame(msg))


async def take(reader: asyncio.StreamReader) -> Message:
    """The next message; IncompleteReadError once the other side is gone."""
    n = int.from_bytes(await reader.readexactly(_HEADER), "little")
    # the socket lives in a 0700 directory of this user: only the run's own processes reach it
    msg = pickle.loads(await reader.readexactly(n))  # noqa: S301
    assert isinstance(msg, tuple)
    return msg


class GroupPool:
    """The `SamplePool` of a local run's shards in several processes, kept by the parent: a
    level run's pool closes once every shard expected has handed in (every planned shard for the
    first level run, then those the previous one closed with), minus the shards whose process
    is gone (`lost`), or `wait_s` after a shard handed in. A late shard gets the closed set."""

    def __init__(self, shard_ids: Sequence[str], wait_s: float) -> None:
        self.planned = sorted(shard_ids)
        self.wait_s = wait_s
        self._lost: set[str] = set()
        self._got: dict[int, dict[str, dict[str, list[float]]]] = {}
        self._closed: dict[int, tuple[str, ...]] = {}
        self._done: dict[int, asyncio.Event] = {}

    async def pool(self, run: int, shard_id: str, samples: dict[str, list[float]]) -> Pooled:
        if run not in self._closed:
            self._got.setdefault(run, {})[shard_id] = samples
            self._maybe_close(run)
        done = self._done.setdefault(run, asyncio.Event())
        try:
            await asyncio.wait_for(done.wait(), self.wait_s)
        except TimeoutError:
            self._close(run)
        present = self._closed[run]
        got = self._got.get(run, {})
        return Pooled(
            concat({s: got[s] for s in present}),
            present,
            tuple(s for s in self.planned if s not in present),
        )

    def lost(self, shard_ids: Iterable[str]) -> None:
        """These shards' process is gone: no open pool waits for them any more."""
        self._lost.update(shard_ids)
        for run in list(self._got):
            self._maybe_close(run)

    def _expected(self, run: int) -> set[str]:
        base = self._closed.get(run - 1, tuple(self.planned))
        return set(base) - self._lost

    def _maybe_close(self, run: int) -> None:
        if run not in self._closed and self._expected(run) <= set(self._got.get(run, {})):
            self._close(run)

    def _close(self, run: int) -> None:
        if run not in self._closed:
            self._closed[run] = tuple(sorted(self._got.get(run, {})))
            self._done.setdefault(run, asyncio.Event()).set()


class ChildPool:
    """A measuring process's side of the run's `GroupPool`: hands in over the socket and waits
    for the parent's answer (`resolve`, called by the process's reader)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._waiting: dict[tuple[int, str], asyncio.Future[Pooled]] = {}

    async def pool(self, run: int, shard_id: str, samples: dict[str, list[float]]) -> Pooled:
        fut: asyncio.Future[Pooled] = asyncio.get_running_loop().create_future()
        self._waiting[(run, shard_id)] = fut
        put(self.writer, "pool", run, shard_id, samples)
        return await fut

    def resolve(self, run: int, shard_id: str, pooled: Pooled) -> None:
        fut = self._waiting.pop((run, shard_id), None)
        if fut is not None and not fut.done():
            fut.set_result(pooled)

    def parent_gone(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(RuntimeError("the run's parent process is gone"))
        self._waiting.clear()
