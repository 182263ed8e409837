"""The engine behind Locust mode: a process of its own, without gevent, running peakload's shard
state, target and fold on one asyncio loop tuned for stamping (loadgen.engine.runtime). A Locust
process sends it requests over a socket (loadgen.locust.wire) and gets back each request's metrics;
every record, every tick and the shard's self-check go to the `ShardStore` it was started with.

Why a process and not a thread: Locust monkey-patches sockets, selectors and threads with gevent
at import, so an asyncio loop inside a Locust process would read through gevent's sockets and the
self-check's probe thread would become a greenlet that only runs when the loop is idle: its lag
would read zero exactly when it matters. Here the instrument runs as it does under `peakload run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from loadgen.checks.calibrate import calibrate
from loadgen.engine.fold import execute
from loadgen.engine.plan import ShardPlan, Sink
from loadgen.engine.schedule import Level
from loadgen.engine.scrubbing import ScrubbingSink
from loadgen.engine.shard import LevelWindow, Shard
from loadgen.engine.workload import Prompt
from loadgen.errors import PeakloadError
from loadgen.locust.wire import HEADER, WireError, frame_length, pack, unpack
from loadgen.results import formulas
from loadgen.results.choices import per_choice_gaps, request_tpot_ms
from loadgen.results.records import Outcome, RequestRecord
from loadgen.runspec.secrets import resolve_target, secret_values
from loadgen.runspec.spec import spec_from_dict
from loadgen.target import Clock
from loadgen.targets import OpenAITarget, build_target, policy_from_env
from loadgen.targets.preflight import preflight

# A Locust level has no planned end: its window is open until the next level message.
OPEN_S = 1e9
MAX_CONNECTIONS = 4096  # a cap, not a pool size: connections open as users need them
MAX_REQUESTS = 1 << 53
SESSIONS_PER_SHARD = 1_000_000
_NS = 1_000_000_000


@dataclass(slots=True)
class ShardEnd:
    """How the engine's shard ended: what the store's `shards` row records."""

    status: str  # completed | failed
    valid: bool
    invalid_reasons: list[str]
    requests_scheduled: int
    outcomes: dict[str, int] = field(default_factory=dict)
    records_written: int = 0
    error: str | None = None


class ShardStore(Protocol):
    """Where an engine's shard goes: `begin` registers the shard (state running) and returns the
    Sink its records go to; `end` records how it ended, after the sink was closed."""

    def begin(self, plan: ShardPlan) -> Sink: ...

    def end(self, plan: ShardPlan, result: ShardEnd) -> None: ...


def request_metrics(rec: RequestRecord) -> dict[str, Any]:
    """What Locust is told about one record, by loadgen.results.formulas (all ms, from the send):
    `ttft`, `tpot` (when output_tokens > 1) and `e2e` where the record has them; `itl` = [[per-token
    ms, k], ...]: each token-carrying chunk after the first (`token_gaps`), its gap to the
    previous one shared by its k tokens (`per_token_gap_ms`).
    `kind` is the failure kind (`ok`, `http_<status>`, `timeout:<phase>`, `stream_error`, ...)."""
    kind = rec.outcome.value
    if rec.outcome is Outcome.HTTP_ERROR:
        kind = f"http_{rec.http_status}" if rec.http_status is not None else "http_unknown"
    elif rec.outcome in (Outcome.TIMEOUT, Outcome.NOT_SENT) and rec.error_phase:
        kind = f"{kind}:{rec.error_phase}"
    out: dict[str, Any] = {"kind": kind, "tokens": rec.output_tokens}
    offsets = np.asarray(rec.chunk_offsets_us, dtype=np.int64)
    tokens = np.asarray(rec.chunk_tokens, dtype=np.int64)
    choices = np.asarray(rec.chunk_choices, dtype=np.int64) if rec.chunk_choices else None
    for key, metric in (("e2e", formulas.E2E), ("ttft", formulas.TTFT), ("tpot", formulas.TPOT)):
        if metric is formulas.TPOT and choices is not None:  # n > 1: per choice
            value = request_tpot_ms(offsets, tokens, choices)
        else:
            value = metric.of_record(rec)
        if math.isfinite(value):
            out[key] = value
    if choices is not None:
        gaps, k = per_choice_gaps(offsets, tokens, choices)
    else:
        gaps, k = formulas.token_gaps(offsets, tokens)
    per_token = formulas.per_token_gap_ms(gaps, k)
    out["itl"] = [[float(g), int(n)] for g, n in zip(per_token, k, strict=True)]
    return out


class _LocustShard(Shard):
    """The runner's shard state, telling the engine about each record it emits."""

    def __init__(self, *args: Any, on_record: Callable[[RequestRecord], None], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._on_record = on_record

    def emit(self, rec: RequestRecord) -> None:
        super().emit(rec)
        self._on_record(rec)


class _Session:
    """One Locust test on this engine: from `start` to `stop`."""

    def __init__(self, start: dict[str, Any], store: ShardStore, send: Callable[..., None]):
        self.spec = spec_from_dict(start["spec"], where="the Locust test's spec")
        self.plan = ShardPlan(
            run_id=str(start["run_id"]),
            shard_id=str(start["shard_id"]),
            region=str(start.get("region") or self.spec.regions[0].name),
            slot=0,
            fraction=1.0,
            seed=int(start.get("seed", 0)),
            users_per_level=[],
            max_requests=MAX_REQUESTS,
            spec=self.spec.public_dict(),
            extra={"driver": "locust"},
        )
        self.store, self.send = store, send
        self.emitted: dict[int, RequestRecord] = {}
        self.taken: dict[int, tuple[LevelWindow, int]] = {}  # indices without a record yet
        self.background: list[asyncio.Task[Any]] = []
        self.target: OpenAITarget | None = None
        self.shard: _LocustShard | None = None
        self.window: LevelWindow | None = None
        self.sink: Sink | None = None
        self.level0 = start.get("level") or {"index": 0, "users": 0, "steady": False}

    async def begin(self, clock: Clock) -> None:
        # the operator's own Locust test: private targets are theirs, as in `peakload run`
        policy = policy_from_env().allowing_private()
        # headers_env is read here, in the process that sends
        sending = resolve_target(self.spec.target)
        self.target = build_target(sending, policy, max_connections=MAX_CONNECTIONS).client
        await preflight(self.target)
        tpw = await calibrate(self.spec, self.target, self.plan.run_id)
        # what servers send back is scrubbed before it is stored (loadgen.scrub)
        self.sink = ScrubbingSink(self.store.begin(self.plan), secret_values(sending))
        self.shard = _LocustShard(
            self.plan,
            self.target,
            self.sink,
            clock=clock,
            abort=asyncio.Event(),
            on_tick=None,
            tokens_per_word=tpw,
            on_record=self._on_record,
        )
        self.level(self.level0)
        self.background = [
            asyncio.create_task(self.shard.check.lag.run()),
            asyncio.create_task(self.shard.ticker(clock())),
        ]

    def _on_record(self, rec: RequestRecord) -> None:
        self.taken.pop(rec.index, None)
        self.emitted[rec.index] = rec

    def level(self, msg: dict[str, Any]) -> None:
        """A new level starts now, or the current one's ramp ended (`steady`)."""
        shard = self.shard
        assert shard is not None
        index, users = int(msg["index"]), float(msg["users"])
        now = shard.clock()
        w = self.window
        if w is None or w.level.index != index:
            lvl = Level(index, "concurrency", users, OPEN_S, OPEN_S, 0.0)
            w = self.window = LevelWindow(lvl, now, now + int(OPEN_S * _NS))
            shard.level_index = index
        if msg.get("steady"):
            w.level = dataclasses.replace(w.level, warmup_s=(now - w.start) / _NS)

    def request(self, msg: dict[str, Any]) -> None:
        shard, window = self.shard, self.window
        assert shard is not None and window is not None
        index = shard.take_index()
        if index is None:
            self.send({"op": "done", "id": msg["id"], "kind": "not_sent:stopping", "itl": []})
            return
        # the Locust user stamped when it asked (CLOCK_MONOTONIC is one clock for every process
        # on the host): the hop to this process counts as dispatch delay, never as the server's
        sched = min(int(msg.get("t_ns") or shard.clock()), shard.clock())
        max_tokens = msg.get("max_tokens")
        messages = msg.get("messages")
        prompt = shard.workload.prompt(index, None, max_tokens)
        if messages:  # the user's own prompt: its length is the server's to count (usage)
            prompt = Prompt(messages, -1, prompt.max_tokens, adapter=prompt.adapter)
        session = tuple(msg["session"]) if msg.get("session") else None
        self.taken[index] = (window, sched)
        shard.track(
            asyncio.create_task(
                self._one(msg["id"], index, window, sched, prompt, messages, session)
            )
        )

    async def _one(
        self,
        req_id: int,
        index: int,
        window: LevelWindow,
        sched: int,
        prompt: Prompt,
        messages: list[dict[str, str]] | None,
        session: tuple[int, ...] | None,
    ) -> None:
        assert self.shard is not None
        # a Locust process numbers its users' sessions from 0: the shard's seed (its worker
        # index) keeps them apart across the run's shards
        sess = (
            (self.plan.seed * SESSIONS_PER_SHARD + int(session[0]), int(session[1]))
            if session
            else None
        )
        text = await execute(self.shard, index, window, sched, prompt, sess, messages)
        rec = self.emitted.pop(index)
        reply = {"op": "done", "id": req_id, **request_metrics(rec)}
        if sess is not None:
            reply["text"] = text
        self.send(reply)

    async def stop(self) -> ShardEnd:
        """Cancel what is in flight (each a `cancelled` record), tick, flush, judge, close."""
        shard = self.shard
        error = None
        if shard is not None:
            shard.stopping = True
            shard.stop_reason = "run_ended"
            tasks = list(shard.in_flight)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            # a task cancelled before its first step never ran the fold: its request still
            # gets its one record
            for index, (window, sched) in list(self.taken.items()):
                shard.not_sent(index, window, sched, "run_ended")
            for b in self.background:
                b.cancel()
            await asyncio.gather(*self.background, return_exceptions=True)
            shard.tick()
            shard.flush()
        if self.sink is not None:
            try:
                self.sink.close()
            except Exception as exc:  # the shard's failure, reported below
                error = f"store writer: {exc}"
        if self.target is not None:
            await self.target.aclose()
        if shard is None:
            end = ShardEnd("failed", False, ["the engine never started"], 0, error=error)
            if self.sink is not None:  # registered, then failed: its row must not stay running
                self.store.end(self.plan, end)
            return end
        valid, reasons, _ = shard.check.verdict(self.spec.validity)
        end = ShardEnd(
            "failed" if error else "completed",
            valid and error is None,
            [*reasons, *([error] if error else [])],
            shard.next_index,
            dict(shard.outcomes),
            sum(shard.outcomes.values()),
            error,
        )
        if self.sink is not None:
            self.store.end(self.plan, end)
        return end


async def serve(
    sock: socket.socket, store: ShardStore, clock: Clock = time.perf_counter_ns
) -> None:
    """Answer one Locust process on `sock` until it closes: any number of start..stop tests."""
    reader, writer = await asyncio.open_unix_connection(sock=sock)

    def send(msg: dict[str, Any]) -> None:
        writer.write(pack(msg))

    send({"op": "ready"})
    session: _Session | None = None
    try:
        while (msg := await _read(reader)) is not None:
            op = msg["op"]
            if op == "req" and session is not None and session.shard is not None:
                session.request(msg)
            elif op == "level" and session is not None and session.shard is not None:
                session.level(msg)
            elif op == "start":
                if session is not None:
                    await session.stop()
                session = _Session(msg, store, send)
                try:
                    await session.begin(clock)
                except PeakloadError as exc:
                    send({"op": "error", "message": str(exc)})
                    await session.stop()
                    session = None
                    continue
                send({"op": "started", "shard_id": session.plan.shard_id})
            elif op == "stop":
                end = await session.stop() if session is not None else None
                session = None
                send({"op": "stopped", **(dataclasses.asdict(end) if end else {})})
            elif op == "req":
                send({"op": "done", "id": msg["id"], "kind": "not_sent:no_test", "itl": []})
            await writer.drain()
    finally:
        if session is not None:
            with contextlib.suppress(Exception):
                await session.stop()
        writer.close()


async def _read(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        header = await reader.readexactly(HEADER.size)
        body = await reader.readexactly(frame_length(header))
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise WireError("the Locust process closed mid-frame") from None
        return None
    return unpack(body)
