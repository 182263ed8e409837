"""The raw HTTP/1.1 exchange (loadgen.targets.transport; `rawtransport` opens them): one
request/response on a pooled connection (see rawpool), with chunked and Content-Length bodies
and one timer handle per request, rescheduled lazily (reads only note the loop time). Each body
read keeps the stamp its bytes got on arrival.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from loadgen.errors import PhaseTimeout, StreamProtocolError, TransportError
from loadgen.target import Clock
from loadgen.targets.http_common import (
    ResponseHead,
    StaleConnection,
    StreamReset,
    StreamTruncated,
    keep_alive,
    parse_head,
    read_some,
)
from loadgen.targets.loopwatch import MONOTONIC_CLOCKS, watch
from loadgen.targets.rawpool import (
    DEFAULT_KEEPALIVE_EXPIRY_S,
    NO_MARKER,
    Conn,
    RawPool,
    Read,
)
from loadgen.targets.resend import (
    bytes_acked,
    not_resent_detail,
    reached,
    should_resend,
    transport_socket,
)
from loadgen.targets.tcpinfo import acked, data_segments_in, read_info
from loadgen.targets.transport import Sent

MAX_HEAD_BYTES = 64 * 1024
__all__ = ["DEFAULT_KEEPALIVE_EXPIRY_S", "RawExchange", "RawPool"]


class RawExchange:
    """One request/response on a pooled connection: `open()`, `head()`, then `body()`.

    Timeouts (loop time): before the head, only the deadline (-> phase `headers`); after it, the
    idle gap between reads (-> `idle`) and the deadline (-> `deadline`). `close()` always.
    """

    def __init__(
        self,
        pool: RawPool,
        data: bytes,
        clock: Clock,
        deadline_s: float,
        idle_s: float,
        end_marker: bytes | None = None,
    ) -> None:
        self.pool = pool
        self.end_marker = end_marker or NO_MARKER
        self._head: ResponseHead | None = None
        self.data = data
        self.clock = clock
        self.loop = pool.loop
        self.deadline_at = self.loop.time() + deadline_s
        self.idle_s = idle_s
        self.conn: Conn | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.failed: TransportError | None = None
        self.head_done = False
        self.complete = False
        self.reusable = False
        self.leftover: list[Read] = []
        # earliest arrival of the read `body()` yielded last, if the loop was woken on time and
        # at all (-1: not known; see rawpool)
        self.lo = self.lo_any = -1
        self.framing = 2  # 0 content-length, 1 chunked, 2 until EOF
        self.remaining = 0
        self.chunked: _Chunked | None = None
        self.nbytes = 0
        self.connect_ns = -1  # set-up of the connection this exchange opened (-1: reused)
        self.resent = 0
        self.server_idle_s: float | None = None  # the response's `Keep-Alive: timeout=`

    async def open(self) -> AsyncIterator[Sent]:
        """Send; yield the send; wait for the head. A kept-alive connection that ends before its
        first byte (StaleConnection) gets the request once more on a new one, yielded too."""
        yield Sent(await self.send(), self.connect_ns)
        try:
            self._head = await self._read_head()
        except StaleConnection as e:
            # the connection was dead before any byte came back: not the server's failure to
            # answer this request, which is sent once more on a new connection if the policy
            # (target.resend_on_stale) and what is known of the request's reach allow it
            policy = self.pool.resend_on_stale
            if not should_resend(policy, e.reach):
                self.pool.note_stale(resent=False)
                raise StreamTruncated(
                    not_resent_detail(e.detail, policy, e.reach), t_ns=e.t_ns
                ) from None
            seen = e.t_ns or self.clock()
            yield Sent(await self.resend(), self.connect_ns, e.detail, seen)
            self._head = await self._read_head()

    def head(self) -> ResponseHead:
        assert self._head is not None, "open() first"
        return self._head

    async def send(self, fresh: bool = False) -> int:
        """Acquire a connection (a new one if `fresh`), write the request; the send time (ns):
        the clock just before the write, which hands the whole request to the kernel at once (a
        server can have it before a clock read after the write returns); or, when a large body
        had to wait for the kernel to take it, the clock once it did."""
        conn = await self.pool.acquire(self.deadline_at, self.clock, fresh)
        self.conn = conn
        self.connect_ns = conn.connect_ns
        conn.requests_left = None  # until this response's head says
        conn.clock = self.clock
        conn.reads = []
        if self.timer is None:
            self.timer = self.loop.call_at(self.deadline_at, self._on_timer)
        assert conn.transport is not None
        segments: int | None = 0  # a new connection has received nothing yet
        if conn.from_idle:  # a reused connection may turn out dead: note what was acknowledged
            info = read_info(transport_socket(conn.transport))
            conn.acked_sent, segments = acked(info), data_segments_in(info)
            conn.acked_at_close = None
        sent = self.clock()
        conn.transport.write(self.data)
        if conn.drain is not None:  # a large body is still queued: wait until the kernel took it
            await self._wait(conn.drain)
            sent = self.clock()
        bounded = conn.plain and self.clock in MONOTONIC_CLOCKS
        conn.arrival.sent(sent, watch(self.loop) if bounded else None, segments)
        return sent

    async def resend(self) -> int:
        """After StaleConnection from `head()`: the same request once more, on a new
        connection; its send time (ns)."""
        conn = self.conn
        assert conn is not None and self.resent == 0
        self.resent = 1
        self.pool.note_stale()
        self.conn = None
        self.pool.release(conn, False)
        return await self.send(fresh=True)

    def _on_timer(self) -> None:
        self.timer = None
        conn = self.conn
        now = self.loop.time()
        if now >= self.deadline_at - 1e-3:
            phase = "deadline" if self.head_done else "headers"
            what = "response still streaming" if self.head_done else "no response headers"
            detail = f"deadline passed ({what})"
        elif conn is not None and now - conn.last_read >= self.idle_s - 1e-3:
            phase, detail = "idle", f"no bytes for {self.idle_s:.3g} s"
        else:
            last = conn.last_read if conn is not None else now
            self.timer = self.loop.call_at(
                min(self.deadline_at, last + self.idle_s), self._on_timer
            )
            return
        self.failed = PhaseTimeout(phase, detail, t_ns=self.clock())
        if conn is not None:
            conn.wake()
            if conn.drain is not None and not conn.drain.done():  # stuck writing a large body
                conn.drain.set_result(None)

    async def _wait(self, fut: asyncio.Future[None]) -> None:
        await fut
        if self.failed is not None:
            raise self.failed

    async def _next_reads(self) -> list[Read]:
        """The reads that arrived since the last call; waits for at least one."""
        conn = self.conn
        assert conn is not None
        while True:
            if conn.reads:
                return conn.take_reads()
            if self.failed is not None:
                raise self.failed
            if conn.closed or conn.eof:
                return []
            w: asyncio.Future[None] = self.loop.create_future()
            conn.waiter = w
            await w

    async def _read_head(self) -> ResponseHead:
        """Wait for the status line and headers (1xx interim responses are skipped). Raises
        StaleConnection when a connection taken from the idle pool ends before its first byte
        (once per exchange: see `resend`)."""
        buf = b""
        got = False
        while True:
            reads = await self._next_reads()
            if not reads:
                error = self._eof_error("before the response headers")
                conn = self.conn
                if not got and conn is not None and conn.from_idle and not self.resent:
                    stale = StaleConnection(error.detail, t_ns=error.t_ns)
                    after = conn.acked_at_close
                    if after is None and not conn.closed:
                        after = bytes_acked(transport_socket(conn.transport))
                    stale.reach = reached(conn.acked_sent, after, isinstance(error, StreamReset))
                    raise stale
                raise error
            got = True
            for i, (t, data, lo, lo_any) in enumerate(reads):
                buf += data
                while (end := buf.find(b"\r\n\r\n")) >= 0:
                    head = parse_head(buf[:end], t)
                    buf = buf[end + 4 :]
                    if 100 <= head.status < 200:  # interim (100 Continue): the real one follows
                        continue
                    self.leftover = ([(t, buf, lo, lo_any)] if buf else []) + reads[i + 1 :]
                    self._start_body(head)
                    return head
                if len(buf) > MAX_HEAD_BYTES:
                    raise StreamProtocolError(f"response head over {MAX_HEAD_BYTES} bytes")

    def _start_body(self, head: ResponseHead) -> None:
        self.head_done = True
        conn = self.conn
        assert conn is not None
        h = head.headers
        te = h.get("transfer-encoding", "").lower()
        if "chunked" in te:
            self.framing, self.chunked = 1, _Chunked()
        elif "content-length" in h:
            try:
                self.remaining = int(h["content-length"])
            except ValueError:
                raise StreamProtocolError("malformed Content-Length header") from None
            self.framing = 0
        else:
            self.framing = 2
        conn.batch = conn.sock is not None and self.framing == 1  # see rawpool.BATCH_WAKE_S
        conn.end_marker = self.end_marker
        ka = keep_alive(head.version, h)
        self.reusable = ka.persistent and self.framing != 2
        self.server_idle_s = ka.timeout_s
        if ka.max_requests is not None:
            conn.requests_left = ka.max_requests
        if self.framing == 0 and self.remaining == 0:
            self.complete = True
        # idle timing starts now: the head was a read
        conn.last_read = self.loop.time()
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_at(
            min(self.deadline_at, conn.last_read + self.idle_s), self._on_timer
        )

    async def body(self) -> AsyncIterator[tuple[int, bytes]]:
        """(t_ns, bytes) per network read of the decoded body, until the body ends; `self.lo` and
        `self.lo_any` are that read's earliest possible arrival (see rawpool) while it is being
        consumed."""
        if self.complete:
            return
        reads, self.leftover = self.leftover, []
        while True:
            for t, data, lo, lo_any in reads:
                self.nbytes += len(data)
                if self.framing == 1:
                    assert self.chunked is not None
                    out, done = self.chunked.feed(data)
                elif self.framing == 0:
                    out = data if len(data) <= self.remaining else data[: self.remaining]
                    self.remaining -= len(out)
                    done = self.remaining == 0
                else:
                    out, done = data, False
                if out:
                    self.lo, self.lo_any = lo, lo_any
                    yield t, out
                if done:
                    self.complete = True
                    return
            reads = await self._next_reads()
            if not reads:
                if self.framing == 2:
                    self.complete = True
                    return
                raise self._eof_error("before the response body ended")

    async def read_some(self, limit: int) -> bytes:
        """Up to `limit` bytes of the body (error details); gives up quietly on EOF/timeout."""
        return await read_some(self.body(), limit)

    def one_segment_reads(self) -> bool:
        """Every read of this response so far held one data segment (see tcpinfo): then the
        events of each arrived together, at its kernel stamp."""
        conn = self.conn
        if conn is None or conn.arrival.segments_at_send < 0:
            return False
        now = data_segments_in(read_info(transport_socket(conn.transport)))
        return conn.arrival.one_segment_each(now)

    def _eof_error(self, where: str) -> TransportError:
        conn = self.conn
        exc = conn.exc if conn is not None else None
        t = self.clock()
        if isinstance(exc, OSError):
            return StreamReset(
                f"connection reset {where} ({type(exc).__name__}, {self.nbytes} body bytes)",
                t_ns=t,
            )
        return StreamTruncated(
            f"connection closed by the server {where} ({self.nbytes} body bytes)", t_ns=t
        )

    def expect_end(self, grace_s: float) -> None:
        """The response is logically complete: wait at most `grace_s` more for the body's end."""
        if self.idle_s > grace_s and self.conn is not None:
            self.idle_s = grace_s
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(
                min(self.deadline_at, self.loop.time() + grace_s), self._on_timer
            )

    async def aclose(self) -> None:
        """Release the connection: back to the pool only after a complete, reusable response."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.conn is not None:
            self.pool.release(self.conn, self.complete and self.reusable, self.server_idle_s)
            self.conn = None


class _Chunked:
    """Incremental `Transfer-Encoding: chunked` decoder."""

    __slots__ = ("buf", "crlf", "remaining", "trailers")

    def __init__(self) -> None:
        self.buf = b""
        self.remaining = 0
        self.crlf = False
        self.trailers = False

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        buf = self.buf + data if self.buf else data
        self.buf = b""
        out: list[bytes] = []
        pos, n = 0, len(buf)
        while pos < n:
            if not (self.remaining or self.crlf or self.trailers):  # fast path: a whole chunk
                i = buf.find(b"\r\n", pos)
                if i > pos:
                    try:
                        size = int(buf[pos:i], 16)
                    except ValueError:
                        size = 0  # extensions or garbage: the general path below decides
                    end = i + 2 + size
                    if size > 0 and buf[end : end + 2] == b"\r\n":
                        out.append(buf[i + 2 : end])
                        pos = end + 2
                        continue
            if self.remaining:
                take = min(self.remaining, n - pos)
                out.append(buf[pos : pos + take] if take < n or pos else buf)
                pos += take
                self.remaining -= take
                if not self.remaining:
                    self.crlf = True
                continue
            if self.crlf:
                if n - pos < 2:
                    self.buf = buf[pos:]
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise StreamProtocolError("chunked body: missing CRLF after a chunk")
                pos += 2
                self.crlf = False
                continue
            i = buf.find(b"\r\n", pos)
            if i < 0:
                if n - pos > 4096:
                    raise StreamProtocolError("chunked body: chunk-size line too long")
                self.buf = buf[pos:]
                break
            if self.trailers:
                if i == pos:  # the blank line after the last chunk (and trailers)
                    return b"".join(out), True
                pos = i + 2
                continue
            try:
                size = int(buf[pos:i].split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise StreamProtocolError("chunked body: bad chunk size") from None
            if size < 0:
                raise StreamProtocolError("chunked body: bad chunk size")
            pos = i + 2
            if size == 0:
                self.trailers = True
            else:
                self.remaining = size
        return (out[0] if len(out) == 1 else b"".join(out)), False
