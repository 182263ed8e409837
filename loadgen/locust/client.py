"""The Locust side of the wire to a peakload engine process (loadgen.locust.engine): starting it,
framing requests to it from any greenlet, and turning each answer into Locust request events.
gevent-only: it runs inside a Locust process (sockets and threads there are gevent's).
"""

from __future__ import annotations

import itertools
import logging
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.event import AsyncResult, Event
from gevent.lock import Semaphore
from locust.env import Environment

from loadgen.errors import PeakloadError
from loadgen.locust.wire import HEADER, WireError, frame_length, pack, unpack

log = logging.getLogger("peakload.locust")

ENGINE_READY_S = 120.0  # start-up, preflight and calibration of the engine
STOP_WAIT_S = 60.0  # an engine flushing its records at the end of a test
RELEASE_INTERVAL_S = 0.002


class RequestFailed(Exception):
    """A failed request, as Locust's failure table shows it: by kind (`http_429`,
    `timeout:first_token`, `stream_error`), never by its detail text."""


@dataclass(slots=True)
class LLMResponse:
    """What `LLMUser.chat` returns. Times are ms from the send; None when it never happened."""

    ok: bool
    kind: str
    tokens: int
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float | None
    text: str | None = None


class EngineClient:
    """The engine process of this Locust process and the socket to it (gevent side)."""

    def __init__(
        self,
        environment: Environment,
        command: list[str],
        on_error: Callable[[Environment, str], None],
    ) -> None:
        self.env, self.on_error = environment, on_error
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        self.proc = subprocess.Popen(
            [*command, "--fd", str(theirs.fileno())], pass_fds=(theirs.fileno(),)
        )
        theirs.close()
        self.lock = Semaphore()
        self.ready, self.started = Event(), Event()
        self.error: str | None = None
        self.waiting: dict[int, tuple[AsyncResult, str]] = {}
        self.stopped: AsyncResult | None = None
        self.shard_id = ""
        self.closing = False
        self.queued, self.started_at = itertools.count(), 0.0  # users waiting for the start
        self.reported = False  # an engine error was told to the test (once is enough)
        self.ids = itertools.count()
        self.reader = gevent.spawn(self._read)

    def send(self, msg: dict[str, Any]) -> None:
        with self.lock:  # one frame at a time: greenlets must not interleave partial writes
            self.sock.sendall(pack(msg))

    def start(self, msg: dict[str, Any]) -> None:
        self.queued, self.started_at = itertools.count(), 0.0
        self.shard_id = str(msg.get("shard_id", ""))
        self.started.clear()
        self.error = None
        self.send({"op": "start", **msg})

    def request(self, body: dict[str, Any], name: str) -> AsyncResult:
        if not self.started.is_set():
            # users spawned while the engine was starting are let go RELEASE_INTERVAL_S apart,
            # as the runner spaces closed-loop users: all at once would measure this
            # process's own serialisation as their dispatch delay
            place = next(self.queued)
            if not self.started.wait(ENGINE_READY_S) or self.error:
                raise PeakloadError(self.error or "the peakload engine did not start in time")
            due = self.started_at + place * RELEASE_INTERVAL_S
            gevent.sleep(max(0.0, due - time.monotonic()))
        if self.error:
            raise PeakloadError(self.error)
        rid = next(self.ids)
        result = AsyncResult()
        self.waiting[rid] = (result, name)
        self.send({"op": "req", "id": rid, "t_ns": time.perf_counter_ns(), **body})
        return result

    def stop(self) -> dict[str, Any] | None:
        self.stopped = AsyncResult()
        self.send({"op": "stop"})
        try:
            value: dict[str, Any] = self.stopped.get(timeout=STOP_WAIT_S)
        except gevent.Timeout:
            log.error("peakload: the engine did not stop within %.0f s", STOP_WAIT_S)
            return None
        self.started.clear()
        return value

    def close(self) -> None:
        self.closing = True
        self.sock.close()
        try:
            self.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _read(self) -> None:
        buf = bytearray()
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= HEADER.size:
                    n = frame_length(bytes(buf[: HEADER.size]))
                    if len(buf) < HEADER.size + n:
                        break
                    msg = unpack(bytes(buf[HEADER.size : HEADER.size + n]))
                    del buf[: HEADER.size + n]
                    self._dispatch(msg)
        except (OSError, WireError) as exc:
            self.error = f"the peakload engine's socket failed: {exc}"
        self.error = self.error or "the peakload engine exited"
        self.started.set()
        if not self.closing and not self.reported:  # died under a test: stop it, saying why
            log.error("peakload: %s", self.error)
            self.on_error(self.env, self.error)
        for result, _ in self.waiting.values():
            result.set_exception(PeakloadError(self.error))
        if self.stopped is not None and not self.stopped.ready():
            self.stopped.set(None)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        op = msg["op"]
        if op == "done":
            entry = self.waiting.pop(int(msg["id"]), None)
            response = fire_events(self.env, entry[1] if entry else "chat", msg)
            if entry is not None:
                entry[0].set(response)
        elif op == "ready":
            self.ready.set()
        elif op == "started":
            self.started_at = time.monotonic()
            self.started.set()
        elif op == "error":
            self.error = str(msg.get("message"))
            self.reported = True
            log.error("peakload: %s", self.error)
            self.started.set()
            self.on_error(self.env, self.error)
        elif op == "stopped" and self.stopped is not None:
            self.stopped.set(msg)


def fire_events(env: Environment, name: str, msg: dict[str, Any]) -> LLMResponse:
    """Locust request events for one answered request: TTFT, TPOT, ITL (one per token) and E2E
    as request types, the request's name as name; a failure once, under E2E, by kind."""
    kind = str(msg.get("kind", "unknown"))
    ok = kind == "ok"
    fire: Any = env.events.request.fire  # Locust's hooks are untyped
    tokens = int(msg.get("tokens") or 0)
    if ok:
        if msg.get("ttft") is not None:
            fire(request_type="TTFT", name=name, response_time=msg["ttft"], response_length=0)
        if msg.get("tpot") is not None:
            fire(request_type="TPOT", name=name, response_time=msg["tpot"], response_length=0)
        for per_token, k in msg.get("itl") or []:
            for _ in range(int(k)):
                fire(request_type="ITL", name=name, response_time=per_token, response_length=1)
    if ok or not kind.startswith(("cancelled", "not_sent")):
        fire(
            request_type="E2E",
            name=name,
            response_time=msg.get("e2e") or 0.0,
            response_length=tokens,
            exception=None if ok else RequestFailed(kind),
        )
    return LLMResponse(
        ok, kind, tokens, msg.get("ttft"), msg.get("tpot"), msg.get("e2e"), msg.get("text")
    )
