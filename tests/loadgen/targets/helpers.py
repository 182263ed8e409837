"""Small helpers shared by the target tests: a target on a scripted server, event collection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import Clock, EventKind, PreparedRequest, StreamEvent
from loadgen.targets import OpenAITarget

T = TypeVar("T")
TRANSPORTS = ["raw", "httpx"]
LOOPS = ["asyncio", "uvloop"]


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a fresh event loop of the named kind (the runner may use either)."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def make_target(
    base_url: str, transport: str, *, api: str = "openai-chat", max_connections: int = 4, **kw: Any
) -> OpenAITarget:
    spec_kw = {k: kw.pop(k) for k in list(kw) if k in TargetSpec.model_fields}
    spec = TargetSpec(api=api, base_url=base_url, model="m", **spec_kw)  # type: ignore[arg-type]
    return OpenAITarget(spec, max_connections=max_connections, transport=transport, **kw)


def request(
    rid: str = "r1", *, deadline_s: float = 10.0, idle_s: float = 5.0, **body: Any
) -> PreparedRequest:
    body = body or {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    return PreparedRequest(request_id=rid, body=body, deadline_s=deadline_s, idle_timeout_s=idle_s)


async def collect(
    target: OpenAITarget, req: PreparedRequest, clock: Clock = time.perf_counter_ns
) -> tuple[list[StreamEvent], BaseException | None]:
    """Every event the stream yielded, and the exception it ended with (None if clean)."""
    events: list[StreamEvent] = []
    try:
        async for ev in target.stream(req, clock):
            events.append(ev)
    except Exception as e:
        return events, e
    return events, None


def text_of(events: list[StreamEvent], kind: EventKind) -> str:
    return "".join(e.text for e in events if e.kind == kind)


def count(events: list[StreamEvent], kind: EventKind) -> int:
    return sum(1 for e in events if e.kind == kind)
