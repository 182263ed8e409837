"""The contract between a target and its HTTP transport: a `Transport` opens `Exchange`s, and an
exchange sends one request (serialised by the transport), yields its send(s), gives the response
head, then streams the body as (arrival stamp, bytes) reads until the body's end. Framing (SSE,
NDJSON) and the API's JSON live above this line; connections, reuse and stamps below it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from loadgen.target import Clock
from loadgen.targets.http_common import ResponseHead


@dataclass(slots=True)
class Sent:
    """The request's bytes went to the kernel at `t_ns` (`connect_ns`: set-up of a connection
    opened for it, -1 when reused). `resent` names why this is a second send: the first went
    out on a kept-alive connection the server had closed (`resent_ns`: when that was seen)."""

    t_ns: int
    connect_ns: int = -1
    resent: str = ""
    resent_ns: int = 0


@dataclass(slots=True)
class HttpRequest:
    """One request as the API layer builds it; the transport serialises it."""

    method: str
    target: str  # origin-form: path and query
    headers: dict[str, str]  # per-request headers (lower-case names), beside the static ones
    body: bytes
    end_marker: bytes | None = None
    """Bytes whose presence in a read means the API's stream may be ending there (`[DONE]` for
    OpenAI SSE): a transport that batches consumer wake-ups wakes at once for such a read."""


class Exchange(Protocol):
    connect_ns: int
    lo: int
    """Earliest arrival of the body read yielded last (the kernel-stamp bound) if the event loop
    was woken on time, -1: unknown (see rawpool)."""
    lo_any: int
    """The same without assuming the loop's wake-up was on time (at most `lo`), -1: unknown."""

    def one_segment_reads(self) -> bool:
        """True when every read of the response so far held exactly one data segment (kernel
        counts, raw transport on Linux); False when that is not known."""
        ...

    def open(self) -> AsyncIterator[Sent]:
        """Send the request; yield each send (a second one only after a stale kept-alive
        connection); return once the response head has arrived (then `head()` has it)."""
        ...

    def head(self) -> ResponseHead: ...

    def body(self) -> AsyncIterator[tuple[int, bytes]]:
        """(t_ns, bytes) per network read of the decoded body, until the body's end."""
        ...

    async def read_some(self, limit: int) -> bytes:
        """Up to `limit` bytes of the body (error details); quiet on EOF or timeout."""
        ...

    def expect_end(self, grace_s: float) -> None:
        """The response is logically complete: wait at most `grace_s` more for the body's end."""
        ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    name: str

    @property
    def reuse(self) -> bool:
        """False once the server is seen to close connections after each response."""
        ...

    @property
    def stale(self) -> int:
        """Requests re-sent because their kept-alive connection was dead."""
        ...

    def exchange(
        self, request: HttpRequest, clock: Clock, deadline_s: float, idle_s: float
    ) -> Exchange: ...

    async def warm(self, connections: int, probe_target: str) -> None:
        """Open up to `connections` keep-alive connections (`probe_target`: a cheap GET for a
        transport that can only connect by sending a request)."""
        ...

    async def aclose(self) -> None: ...
