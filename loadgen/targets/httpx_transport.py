"""The httpx transport (loadgen.targets.transport): the same contract as `rawhttp` on an
`httpx.AsyncClient` with explicit limits and timeouts, redirects off and no environment config.
Reads are stamped as httpcore hands them over (`aiter_raw`), one clock read per body chunk.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx

from loadgen.errors import PhaseTimeout
from loadgen.target import Clock
from loadgen.targets.http_common import (
    ResponseHead,
    StreamTruncated,
    keep_alive,
    read_some,
)
from loadgen.targets.httpx_errors import translate
from loadgen.targets.httpx_keepalive import (
    apply_keep_alive,
    closed_soon,
    connection_socket,
    request_connection,
)
from loadgen.targets.rawhttp import DEFAULT_KEEPALIVE_EXPIRY_S
from loadgen.targets.rawpool import LEARN_QUICK_CLOSES, QUICK_CLOSE_S
from loadgen.targets.resend import (
    bytes_acked,
    not_resent_detail,
    reached,
    should_resend,
)
from loadgen.targets.transport import HttpRequest, Sent

_SENT_EVENT = "http11.send_request_body.complete"
_HEADERS_STARTED = "http11.send_request_headers.started"  # a connection was acquired
_CONNECT_STARTED = "connection.connect_tcp.started"  # only when a new connection is opened
_CONNECT_DONE = ("connection.connect_tcp.complete", "connection.start_tls.complete")
_HEAD_FAILED = "http11.receive_response_headers.failed"  # the socket is still open here
# httpcore's message when a kept-alive connection closes before any byte of the response
_NO_RESPONSE = "without sending a response"


class _Deadline:
    """One timer per request: when it fires during one of our awaits, it cancels the task, and
    the await converts that cancellation into PhaseTimeout (as asyncio.timeout does, but without
    a timer per read and without ever cancelling the caller's own code between our awaits)."""

    __slots__ = ("armed", "cancelled", "fired", "handle", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.task = asyncio.current_task()
        self.fired = self.armed = self.cancelled = False
        self.handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.fired = True
        if self.armed and self.task is not None:
            self.cancelled = True
            self.task.cancel()

    def ours(self) -> bool:
        """In `except CancelledError`: True if this deadline caused it (and nobody else did)."""
        if self.cancelled and self.task is not None:
            self.cancelled = False
            return self.task.uncancel() == 0
        return False


class HttpxClient:
    """An `httpx.AsyncClient` made on first use inside the running loop."""

    def __init__(
        self,
        *,
        max_connections: int,
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
        resend_on_stale: bool | None = None,
    ) -> None:
        self.resend_on_stale = resend_on_stale  # target.resend_on_stale (targets.resend)
        self.limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=keepalive_expiry_s,
        )
        self.connect_timeout_s = connect_timeout_s
        self.verify: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._client: httpx.AsyncClient | None = None
        self._fresh: httpx.AsyncClient | None = None
        self.keepalive_expiry_s = keepalive_expiry_s
        self.stale = 0  # requests re-sent because their reused connection was dead
        self.quick_closes = 0  # connections the server closed right after a response
        self.reuse_worked = 0  # responses on a connection that had served before
        self.watched: list[tuple[Any, float]] = []  # (connection, loop time its response ended)

    @property
    def reuse(self) -> bool:
        """False once the server is seen to close after every response, by the raw pool's
        rule: LEARN_QUICK_CLOSES closes within QUICK_CLOSE_S of a response (or stale reused
        connections), more than the reuses that worked. Then each request says
        `Connection: close`."""
        q = self.quick_closes
        return not (q >= LEARN_QUICK_CLOSES and q > self.reuse_worked)

    def watch_close(self, conn: Any) -> None:
        """A response on `conn` just ended whole: a close of it by the server within
        QUICK_CLOSE_S is a close after the response (loadgen.targets.httpx_keepalive). Looked
        at when the next request starts and QUICK_CLOSE_S later, whichever comes first."""
        loop = asyncio.get_running_loop()
        self.watched.append((conn, loop.time()))
        loop.call_later(QUICK_CLOSE_S, self.sweep)

    def sweep(self) -> None:
        """Count the watched connections closed within QUICK_CLOSE_S of their response; forget
        those closed later or still open past it."""
        if not self.watched:
            return
        now = asyncio.get_running_loop().time()
        keep = []
        for conn, ended in self.watched:
            if closed_soon(conn):
                self.quick_closes += now - ended <= QUICK_CLOSE_S + 0.05
            elif now - ended < QUICK_CLOSE_S:
                keep.append((conn, ended))
        self.watched = keep

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = self._make(self.limits)
        return self._client

    @property
    def fresh(self) -> httpx.AsyncClient:
        """For a request sent once more after its kept-alive connection died: a client that
        keeps no connection, so the re-send opens a new one, as the raw pool's does. The pool
        could hand it another idle connection the server dropped in the same moment, its FIN
        not yet in, and the re-send failed too (tests/loadgen/targets/test_resend_policy.py)."""
        if self._fresh is None:
            max_connections = self.limits.max_connections
            self._fresh = self._make(
                httpx.Limits(max_connections=max_connections, max_keepalive_connections=0)
            )
        return self._fresh

    def _make(self, limits: httpx.Limits) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            limits=limits,
            timeout=httpx.Timeout(self.connect_timeout_s),
            follow_redirects=False,
            trust_env=False,  # no proxies, netrc credentials or CA overrides from the env
            verify=self.verify,
        )

    async def warm(self, url: str, headers: dict[str, str], connections: int) -> None:
        """Open `connections` keep-alive connections with concurrent GETs of `url`."""

        async def one() -> None:
            try:
                r = await self.client.get(url, headers=headers)
            except httpx.TransportError as e:
                raise translate(e, "connect") from None
            await r.aclose()

        await asyncio.gather(*(one() for _ in range(connections)))

    async def aclose(self) -> None:
        for client in (self._client, self._fresh):
            if client is not None:
                await client.aclose()
        self._client = self._fresh = None


class HttpxTransport:
    """Requests to one origin (`scheme://netloc`) through an `HttpxClient`."""

    name = "httpx"

    def __init__(
        self,
        origin: str,
        headers: dict[str, str],
        *,
        max_connections: int,
        connect_timeout_s: float,
        ssl_context: ssl.SSLContext | None,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
        resend_on_stale: bool | None = None,
    ) -> None:
        self.origin = origin
        self.headers = headers
        self.client = HttpxClient(
            max_connections=max_connections,
            connect_timeout_s=connect_timeout_s,
            ssl_context=ssl_context,
            keepalive_expiry_s=keepalive_expiry_s,
            resend_on_stale=resend_on_stale,
        )

    @property
    def reuse(self) -> bool:
        return self.client.reuse

    @property
    def stale(self) -> int:
        return self.client.stale

    def exchange(
        self, request: HttpRequest, clock: Clock, deadline_s: float, idle_s: float
    ) -> HttpxExchange:
        headers = {**self.headers, **request.headers}
        return HttpxExchange(
            self.client,
            self.origin + request.target,
            headers,
            request.body,
            clock,
            deadline_s,
            idle_s,
            method=request.method,
        )

    async def warm(self, connections: int, probe_target: str) -> None:
        await self.client.warm(self.origin + probe_target, self.headers, connections)

    async def aclose(self) -> None:
        await self.client.aclose()


class HttpxExchange:
    """One request/response through httpx: `open()`, `head()`, `body()`, `aclose()`."""

    def __init__(
        self,
        owner: HttpxClient,
        url: str,
        headers: dict[str, str],
        data: bytes,
        clock: Clock,
        deadline_s: float,
        idle_s: float,
        method: str = "POST",
    ) -> None:
        self.owner = owner
        self.http = owner.client  # owner.fresh once the request is sent again
        self.method = method
        self._head: ResponseHead | None = None
        self.clock = clock
        self.lo = self.lo_any = -1  # reads are stamped in user space: no kernel bound (rawpool)
        self.idle_s = idle_s
        self.sent_ns: int | None = None
        self.connected = False
        loop = asyncio.get_running_loop()
        self.guard = _Deadline(loop, loop.time() + deadline_s)
        connect = min(owner.connect_timeout_s, deadline_s)
        self.request = owner.client.build_request(
            method,
            url,
            content=data,
            headers=headers,
            timeout=httpx.Timeout(
                connect=connect, read=deadline_s, write=deadline_s, pool=deadline_s
            ),
            extensions={"trace": self._trace},
        )
        self.response: httpx.Response | None = None
        self.head_ns = 0
        self.connect_began = -1
        self.connect_ns = -1  # set-up of a connection opened for this request (-1: reused)
        self.resent = 0
        self.complete = False  # the body ended as its framing says
        self.persistent = False
        self.conn: Any = None  # httpcore's connection, once it picked one
        self.sock: Any = None  # its socket
        self.acked_sent: int | None = None  # tcpi_bytes_acked before our write (reused conn)
        self.acked_fail: int | None = None  # ... when the head failed
        self.url, self.data, self.headers = url, data, headers
        self.deadline_s = deadline_s
        if not owner.reuse:
            self.request.headers["connection"] = "close"

    async def _trace(self, name: str, info: dict[str, Any]) -> None:
        if name == _SENT_EVENT:
            self.sent_ns = self.clock()
        elif name == _HEADERS_STARTED:
            self.connected = True
            self.owner.sweep()
            self.conn = request_connection(self.http, info.get("request"))
            if self.connect_began < 0:  # a reused connection: note what was acknowledged
                self.sock = connection_socket(self.conn)
                self.acked_sent = bytes_acked(self.sock)
        elif name == _HEAD_FAILED:
            self.acked_fail = bytes_acked(self.sock)
        elif name == _CONNECT_STARTED:
            self.connect_began = self.clock()
        elif name in _CONNECT_DONE and self.connect_began >= 0:
            self.connect_ns = self.clock() - self.connect_began

    async def open(self) -> AsyncIterator[Sent]:
        """Send and wait for the head (httpx returns only with it, so SENT and HEADERS come
        together); a re-send after a stale kept-alive connection happens inside `send()`."""
        sent = await self.send()
        resent = "reused connection was closed" if self.resent else ""
        yield Sent(sent, self.connect_ns, resent, sent)
        r = self.response
        assert r is not None
        headers = {k.lower(): v for k, v in r.headers.items()}
        owner = self.owner
        ka = keep_alive(r.http_version, headers)
        self.persistent = ka.persistent  # a server that says it closes is no quick close
        apply_keep_alive(self.conn, ka, owner.keepalive_expiry_s)
        if self.connect_began < 0 and not self.resent:
            owner.reuse_worked += 1
        # httpcore reads the body's read timeout when iteration starts: from now on, idle
        self.request.extensions["timeout"]["read"] = self.idle_s
        self._head = ResponseHead(r.status_code, headers, r.http_version, self.head_ns)

    def one_segment_reads(self) -> bool:
        return False  # reads through httpx: no segment counts

    def head(self) -> ResponseHead:
        assert self._head is not None, "open() first"
        return self._head

    async def send(self) -> int:
        """Send and wait for the response head; the clock when the body was written (ns).
        (httpx returns only with the head, so the caller sees SENT and HEADERS together.)"""
        guard = self.guard
        guard.armed = True
        try:
            self.response = await self.http.send(self.request, stream=True)
        except asyncio.CancelledError:
            if guard.ours():
                if not self.connected:
                    raise PhaseTimeout(
                        "connect", "deadline passed before a connection was free"
                    ) from None
                raise PhaseTimeout("headers", "deadline passed (no response headers)") from None
            raise
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            guard.armed = False
            no_answer = not isinstance(e, httpx.RemoteProtocolError) or _NO_RESPONSE in str(e)
            if self.resent or self.connect_began >= 0 or not no_answer:
                raise translate(e, "headers") from None
            # a kept-alive connection died before the response head (reset, or closed without
            # a byte: httpx reads the head whole, so a reset mid-head looks the same and is
            # rare): once more, on a new connection, if target.resend_on_stale and what is
            # known of the request's reach allow it (loadgen.targets.resend)
            reset = not isinstance(e, httpx.RemoteProtocolError)
            reach = reached(self.acked_sent, self.acked_fail, reset)
            policy = self.owner.resend_on_stale
            if not should_resend(policy, reach):
                detail = not_resent_detail("server closed the reused connection", policy, reach)
                raise StreamTruncated(detail) from None
            return await self._resend()
        except httpx.TransportError as e:
            raise translate(e, "headers") from None
        finally:
            guard.armed = False
        self.head_ns = self.clock()
        return self.sent_ns if self.sent_ns is not None else self.head_ns

    async def _resend(self) -> int:
        owner = self.owner
        owner.stale += 1
        owner.quick_closes += 1  # as the raw pool counts a stale connection
        self.resent = 1
        self.sent_ns, self.connected = None, False
        read = self.request.extensions["timeout"]
        # on a new connection, closed after the response: said, so that its close is not
        # learnt as the server's close after a response (HttpxClient.watch_close)
        self.http = owner.fresh
        self.request = self.http.build_request(
            self.method,
            self.url,
            content=self.data,
            headers={**self.headers, "connection": "close"},
            timeout=httpx.Timeout(**{k: read[k] for k in ("connect", "read", "write", "pool")}),
            extensions={"trace": self._trace},
        )
        return await self.send()

    async def body(self) -> AsyncIterator[tuple[int, bytes]]:
        r = self.response
        assert r is not None
        it = r.aiter_raw().__aiter__()
        guard = self.guard
        clock = self.clock
        while True:
            if guard.fired:
                raise PhaseTimeout("deadline", "deadline passed (response still streaming)")
            guard.armed = True
            try:
                chunk = await it.__anext__()
            except StopAsyncIteration:
                self.complete = True
                return
            except asyncio.CancelledError:
                if guard.ours():
                    raise PhaseTimeout(
                        "deadline", "deadline passed (response still streaming)"
                    ) from None
                raise
            except httpx.TransportError as e:
                raise translate(e, "body") from None
            finally:
                guard.armed = False
            yield clock(), chunk

    async def read_some(self, limit: int) -> bytes:
        return await read_some(self.body(), limit)

    def expect_end(self, grace_s: float) -> None:
        """No-op: httpcore fixed the read timeout when the body began; the deadline bounds it."""

    async def aclose(self) -> None:
        self.guard.handle.cancel()
        if self.response is not None:
            await self.response.aclose()
            self.response = None
            if self.complete and self.persistent and self.conn is not None and self.owner.reuse:
                self.owner.watch_close(self.conn)
