"""The raw transport's connections: an asyncio Protocol per socket that stamps each read in
`data_received` (before any parsing) and queues it for its exchange, and a keep-alive pool per
origin with a hard cap on open connections.

Reuse follows RFC 9112 §9 and httpcore's rule: an idle connection is reused only if the peer
has not closed it (no EOF seen, and its socket is not readable while idle: a FIN or stray bytes
still in the kernel), its keep-alive expiry (ours, or the server's `Keep-Alive: timeout=` less a
margin) has not passed, and the server's `max=` allows another request. Servers that advertise
keep-alive yet close right after each response (llama.cpp's does after a stream) are learned:
after `LEARN_QUICK_CLOSES` such closes with no reuse that worked, the pool stops reusing. A
server's idle timeout seen on an idle connection shortens the pool's expiry.

A read's stamp is the kernel's receive time of its last segment when the socket gives one (see
`kstamp`), else the runner's clock at `data_received`; `arrival` bounds how early it came."""

from __future__ import annotations

import asyncio
import collections
import select
import ssl
from typing import cast

from loadgen.errors import PhaseTimeout
from loadgen.target import Clock
from loadgen.targets.arrival import Arrival
from loadgen.targets.http_common import connect_error
from loadgen.targets.kstamp import SCRATCH_BYTES, KernelStamper, StampedSocket, open_stamped_socket
from loadgen.targets.resend import bytes_acked, transport_socket

# (stamp ns, bytes, earliest arrival ns if the loop was woken on time, earliest at all; -1: none)
Read = tuple[int, bytes, int, int]

PAUSE_READS = 64  # unconsumed reads before the socket is paused (consumer far behind)
# With kernel stamps a read's time no longer depends on when it is consumed: a streaming body's
# consumer is woken at most this often (at once for the body's end), not once per token.
BATCH_WAKE_S = 0.05
WAKE_SLICE = 8  # consumers woken per loop iteration when a batch is due
DEFAULT_KEEPALIVE_EXPIRY_S = 4.0  # below uvicorn's 5 s keep-alive: never reuse a dying socket
# A peer close this soon after a response means the server closes after responses (not an idle
# timeout); two such closes, with no reuse that worked, stop reuse on the pool.
QUICK_CLOSE_S, LEARN_QUICK_CLOSES = 0.25, 2
IDLE_TIMEOUT_SHARE = 0.8  # of a server's seen (or announced) idle timeout, used as our expiry
IDLE, BUSY, DEAD = 0, 1, 2
NO_MARKER = b"0\r\n\r\n"  # without an API marker, only the chunked body's end wakes at once


def _no_clock() -> int:
    return 0


class Conn(asyncio.Protocol):
    """One TCP(/TLS) connection. While an exchange owns it, reads land in `reads` stamped."""

    def __init__(self, pool: RawPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.clock: Clock = _no_clock
        self.time = pool.loop.time
        self.sock: StampedSocket | None = None  # set when the kernel gives receive stamps
        self.stamper = pool.stamper
        self.arrival = Arrival()  # how early each read's bytes can have come
        self.plain = False  # kernel-stamped without TLS (its records may straddle reads)
        self.reads: list[Read] = []
        self.waiter: asyncio.Future[None] | None = None
        self.last_read = 0.0  # loop time of the latest read
        self.closed = False
        self.eof = False
        self.exc: BaseException | None = None
        self.state = BUSY
        self.idle_since = 0.0
        self.reading_paused = False
        self.drain: asyncio.Future[None] | None = None
        self.batch = False  # wake the consumer in batches (kernel-stamped streaming body)
        # bytes that may end the API's stream (the framing layer's, e.g. b"[DONE]"): a read with
        # them wakes the consumer at once even when batching
        self.end_marker = NO_MARKER
        self.fd = -1
        self.uses = 0  # responses completed on this connection
        self.expires_at = 0.0  # loop time after which it is not reused
        self.from_idle = False  # the current exchange took it from the idle list
        self.connect_ns = -1  # its set-up time when the current exchange opened it
        self.requests_left: int | None = None  # the server's `Keep-Alive: max=`
        # tcpi_bytes_acked before our write and at the peer's close (loadgen.targets.resend)
        self.acked_sent: int | None = None
        self.acked_at_close: int | None = None

    # --- asyncio callbacks: minimal work; the consumer parses
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        now = self.clock()
        stamp = -1
        sock = self.sock
        if sock is not None and sock.rx_real_ns:
            stamp = self.stamper.to_monotonic(sock.rx_real_ns, now, self.clock)
        t, lo, lo_any = self.arrival.read(stamp, now, len(data) >= SCRATCH_BYTES)
        self.reads.append((t, data, lo, lo_any))
        self.last_read = self.time()
        w = self.waiter
        if w is not None:
            if self.batch and self.end_marker not in data and not data.endswith(b"0\r\n\r\n"):
                self.pool.defer(self)
            else:
                self.waiter = None
                if not w.done():
                    w.set_result(None)
        elif self.state != BUSY:  # an idle keep-alive socket got bytes: it is unusable
            self.close()
        elif len(self.reads) > PAUSE_READS and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self.wake()
        if self.state == IDLE:
            self.pool.peer_closed_idle(self)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.acked_at_close is None:  # the socket is still open during this callback
            self.acked_at_close = bytes_acked(transport_socket(self.transport))
        if self.state == IDLE and not self.eof:
            self.pool.peer_closed_idle(self)
        self.closed = True
        self.exc = exc
        self.wake()
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)
        self.pool.lost(self)

    def pause_writing(self) -> None:
        self.drain = self.pool.loop.create_future()

    def resume_writing(self) -> None:
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)
        self.drain = None

    # --- helpers
    def wake(self) -> None:
        w = self.waiter
        if w is not None:
            self.waiter = None
            if not w.done():
                w.set_result(None)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def readable_while_idle(self) -> bool:
        """Bytes or a FIN the loop has not read yet: an idle connection must have neither."""
        if self.fd < 0:
            return False
        try:
            return bool(select.select([self.fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def take_reads(self) -> list[Read]:
        reads = self.reads
        self.reads = []
        if self.reading_paused and self.transport is not None and not self.closed:
            self.reading_paused = False
            self.arrival.watch = None  # bytes came while the loop was not reading this socket
            self.transport.resume_reading()
        return reads


class RawPool:
    """Keep-alive connections to one origin, at most `max_connections` open at once.

    `connect_timeout_s` bounds TCP+TLS set-up; waiting for a free connection is bounded only by
    the request's deadline (the caller sizes the pool to its concurrency).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        max_connections: int,
        connect_timeout_s: float,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1 (got {max_connections})")
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_expiry_s = keepalive_expiry_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self.idle: list[Conn] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.stamper = KernelStamper()
        self.deferred: set[Conn] = set()
        self.flush_handle: asyncio.Handle | None = None
        self.reuse = True  # False once the server is seen to close after every response
        self.quick_closes = 0  # idle connections the server closed right after a response
        self.reuse_worked = 0  # responses completed on a connection that had served before
        self.opened = 0  # connections opened (warm-up included)
        self.stale = 0  # reused connections found dead when a request was sent on them
        self.resend_on_stale: bool | None = None  # target.resend_on_stale (targets.resend)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or a new event loop: old sockets are unusable
            self._loop, self.idle, self.open = loop, [], 0
            self.waiters.clear()
            self.deferred, self.flush_handle = set(), None
        return loop

    async def _connect(self, deadline_at: float, clock: Clock = _no_clock) -> Conn:
        """A new connection; its set-up time (ns on `clock`) in `conn.connect_ns`."""
        loop = self.loop
        budget = min(self.connect_timeout_s, deadline_at - loop.time())
        began = clock()
        try:
            async with asyncio.timeout(max(budget, 0.0)):
                sock = await open_stamped_socket(loop, self.host, self.port)
                stamped = sock.enable()
                try:
                    _, conn = await loop.create_connection(
                        lambda: Conn(self),
                        sock=sock,
                        ssl=self.ssl_context,
                        server_hostname=self.host if self.ssl_context is not None else None,
                    )
                except BaseException:
                    sock.close()
                    raise
                if stamped:
                    conn.sock = sock
                    conn.plain = self.ssl_context is None
        except TimeoutError:
            raise PhaseTimeout(
                "connect", f"no connection to {self.host}:{self.port} within {budget:.3g} s"
            ) from None
        except OSError as e:  # refused, DNS, unreachable, TLS (ssl.SSLError is an OSError)
            raise connect_error(e, self.host, self.port) from None
        conn.connect_ns = clock() - began
        self.opened += 1
        return conn

    async def acquire(
        self, deadline_at: float, clock: Clock = _no_clock, fresh: bool = False
    ) -> Conn:
        """A connection for one exchange: a live idle one (unless `fresh`), a new one, or the
        next one freed. `conn.from_idle` tells which; a new one's set-up is `conn.connect_ns`."""
        loop = self.loop
        while True:
            now = loop.time()
            while self.idle and not fresh:
                conn = self.idle.pop()
                if not self._usable(conn, now):
                    self._discard(conn)
                    continue
                conn.state = BUSY
                conn.from_idle = True
                conn.connect_ns = -1
                return conn
            if fresh and self.idle and self.open >= self.max_connections:
                self._discard(self.idle.pop(0))  # the oldest idle one makes room
            if self.open < self.max_connections:
                self.open += 1
                try:
                    conn = await self._connect(deadline_at, clock)
                    conn.from_idle = False
                    return conn
                except BaseException:
                    self.open -= 1
                    self._wake_one()
                    raise
            fut: asyncio.Future[None] = loop.create_future()
            self.waiters.append(fut)
            try:
                async with asyncio.timeout_at(deadline_at):
                    await fut
            except BaseException as e:  # timed out or cancelled
                if fut.done() and not fut.cancelled():
                    self._wake_one()  # we were woken but will not use it: pass it on
                else:
                    fut.cancel()  # left in the queue; _wake_one skips it
                if isinstance(e, TimeoutError):
                    raise PhaseTimeout(
                        "connect",
                        f"no free connection (pool of {self.max_connections}) by the deadline",
                    ) from None
                raise

    def _usable(self, conn: Conn, now: float) -> bool:
        """An idle connection may carry a request (see the module docstring)."""
        if conn.closed or conn.eof or now >= conn.expires_at:
            return False
        if conn.readable_while_idle():
            self._note_close(now - conn.idle_since, exact=False)
            return False
        return True

    def peer_closed_idle(self, conn: Conn) -> None:
        """The server closed an idle connection (EOF or reset seen as it happened)."""
        self._note_close(self.loop.time() - conn.idle_since, exact=True)

    def _note_close(self, idle_s: float, *, exact: bool) -> None:
        """Learn from a server's close of an idle connection `idle_s` after its last response:
        at once means it closes after responses; later (seen as it happened) is its idle timeout.
        """
        if idle_s < QUICK_CLOSE_S:
            self.quick_closes += 1
            if self.quick_closes >= LEARN_QUICK_CLOSES and self.quick_closes > self.reuse_worked:
                self.reuse = False
        elif exact:
            self.keepalive_expiry_s = min(self.keepalive_expiry_s, idle_s * IDLE_TIMEOUT_SHARE)

    def note_stale(self, resent: bool = True) -> None:
        """A request on a reused connection got no byte back before the close (`stale`: resent)."""
        self.stale += resent
        self._note_close(0.0, exact=False)

    def defer(self, conn: Conn) -> None:
        """Wake `conn`'s consumer at the next batch flush (one timer for the whole pool)."""
        self.deferred.add(conn)
        if self.flush_handle is None:
            self.flush_handle = self.loop.call_later(BATCH_WAKE_S, self._flush)

    def _flush(self) -> None:
        """Wake the deferred consumers a slice per loop iteration, so the socket reads (and
        their stamps) between slices never wait for a whole batch's parsing."""
        deferred = self.deferred
        for _ in range(min(len(deferred), WAKE_SLICE)):
            deferred.pop().wake()
        if deferred:
            self.flush_handle = self.loop.call_soon(self._flush)
        else:
            self.flush_handle = None

    def release(self, conn: Conn, reusable: bool, server_idle_s: float | None = None) -> None:
        """Give a connection back after an exchange; closed unless `reusable` and healthy.
        `server_idle_s`: the idle timeout the response announced (`Keep-Alive: timeout=`)."""
        if conn.state != BUSY:
            return
        conn.clock = _no_clock
        conn.waiter = None
        conn.batch = False
        conn.end_marker = NO_MARKER
        if reusable:
            if conn.uses > 0:
                self.reuse_worked += 1
            conn.uses += 1
            if conn.eof or conn.closed:  # the server closed as the response ended
                self._note_close(0.0, exact=False)
        left = conn.requests_left
        if (
            reusable
            and self.reuse
            and not (conn.closed or conn.eof)
            and not conn.reads
            and (left is None or left > 0)
        ):
            now = self.loop.time()
            conn.state = IDLE
            conn.idle_since = now
            expiry = self.keepalive_expiry_s
            if server_idle_s is not None:
                expiry = min(expiry, server_idle_s * IDLE_TIMEOUT_SHARE)
            conn.expires_at = now + expiry
            self.idle.append(conn)
            self._wake_one()
        else:
            self._discard(conn)

    def lost(self, conn: Conn) -> None:
        """connection_lost: an idle connection leaves the pool at once."""
        if conn.state == IDLE:
            self.idle = [c for c in self.idle if c is not conn]
            self._discard(conn)

    def _discard(self, conn: Conn) -> None:
        if conn.state != DEAD:
            conn.state = DEAD
            conn.close()
            self.open -= 1
            self._wake_one()

    def _wake_one(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    async def warm(self, connections: int, deadline_s: float) -> None:
        """Open new connections until `connections` are idle (bounded by the pool size)."""
        loop = self.loop
        want = min(connections, self.max_connections) - len(self.idle)
        want = min(want, self.max_connections - self.open)
        if want <= 0:
            return
        deadline_at = loop.time() + deadline_s
        self.open += want
        results = await asyncio.gather(
            *(self._connect(deadline_at) for _ in range(want)), return_exceptions=True
        )
        for r in results:
            if isinstance(r, Conn):
                r.state = BUSY
                r.uses = -1  # not a response: release() counts it back to 0
                self.release(r, True)
            else:
                self.open -= 1
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def close(self) -> None:
        for conn in self.idle:
            conn.state = DEAD
            conn.close()
        self.open -= len(self.idle)
        self.idle = []
