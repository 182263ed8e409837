"""A user-space TCP proxy for fault tests (no netem here): latency per direction, pause/resume
(new connections blackholed, open ones frozen, bytes and closes held in order), reset_all (RST).
`exchanges` keeps, per HTTP/1 request passed through, its connection and the delay the proxy
really added (its timers fire late on a busy host): the truth a measured round trip is held to.
Its asyncio loop runs in a thread: `with TcpProxy(host, port) as p: ... p.pause(); p.resume()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from typing import Any

from tests.support.loopserver import LoopServer

_READ = 65536


class _Pipe:
    """One proxied connection: two directions, each a reader task feeding a delayed writer."""

    def __init__(self, proxy: TcpProxy, client: tuple[asyncio.StreamReader, Any]) -> None:
        self.proxy = proxy
        self.c_reader, self.c_writer = client
        self.u_writer: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.request: tuple[bytes, float] | None = None  # its first line, how long it was held
        self.number = proxy.connections_total

    async def run(self) -> None:
        up: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        down: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        self.tasks.append(asyncio.ensure_future(self._read(self.c_reader, up)))
        await self.proxy._running.wait()  # a connection made while paused waits here
        try:
            u_reader, self.u_writer = await asyncio.open_connection(
                self.proxy.target_host, self.proxy.target_port
            )
        except OSError:
            self.close(reset=True)
            return
        self.tasks += [
            asyncio.ensure_future(self._read(u_reader, down)),
            asyncio.ensure_future(self._write(up, self.u_writer, "up")),
            asyncio.ensure_future(self._write(down, self.c_writer, "down")),
        ]
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.close()

    async def _read(
        self, reader: asyncio.StreamReader, q: asyncio.Queue[tuple[float, bytes | None]]
    ) -> None:
        while True:
            try:
                data = await reader.read(_READ)
            except (ConnectionError, OSError):
                data = b""
            q.put_nowait((time.monotonic(), data or None))
            if not data:
                return

    async def _write(
        self, q: asyncio.Queue[tuple[float, bytes | None]], writer: Any, direction: str
    ) -> None:
        while True:
            t, data = await q.get()
            delay = t + self.proxy.latency_s(direction) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.proxy._running.wait()
            if data is None:  # the other side closed: pass the close on, in order
                with contextlib.suppress(OSError):
                    writer.close()
                for task in self.tasks:
                    task.cancel()
                return
            try:
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                for task in self.tasks:
                    task.cancel()
                return
            self._note_held(direction, data, time.monotonic() - t)

    def _note_held(self, direction: str, data: bytes, held_s: float) -> None:
        """What the proxy really added to an HTTP/1 exchange: the request's first chunk's
        hold plus its answer's first chunk's, kept by the request line."""
        if direction == "up" and data[:4] in (b"GET ", b"POST", b"HEAD"):
            self.request = (data.split(b"\r\n", 1)[0], held_s)
        elif direction == "down" and self.request is not None:
            line, up_s = self.request
            self.proxy.exchanges.append((self.number, line.decode("latin-1"), up_s + held_s))
            self.request = None

    def close(self, reset: bool = False) -> None:
        for w in (self.c_writer, self.u_writer):
            if w is None:
                continue
            if reset:
                sock = w.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
            with contextlib.suppress(OSError, RuntimeError):
                w.close()
        for task in self.tasks:
            task.cancel()


class TcpProxy(LoopServer):
    """Forward 127.0.0.1:`port` (chosen by the kernel when `listen_port` is 0) to the target."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_port: int = 0,
        latency_ms: float = 0.0,
        listen_host: str = "127.0.0.1",
    ) -> None:
        super().__init__("tcpproxy", listen_host, listen_port)
        self.target_host, self.target_port = target_host, target_port
        self._latency_s = {"up": latency_ms / 1000, "down": latency_ms / 1000}
        self._pipes: set[_Pipe] = set()
        self._running = asyncio.Event()
        self._running.set()  # forwarding until `pause`
        self.connections_total = 0
        # connection number, request line, seconds really added
        self.exchanges: list[tuple[int, str, float]] = []

    # -- control (any thread) ---------------------------------------------------------------

    def pause(self) -> None:
        """Freeze: nothing is forwarded either way, new connections are accepted but not
        connected upstream. Data and closes are held, in order, until `resume`."""
        self._call(self._running.clear)

    def resume(self) -> None:
        self._call(self._running.set)

    def reset_all(self) -> None:
        """RST every open connection (both sides)."""

        def reset() -> None:
            for pipe in list(self._pipes):
                pipe.close(reset=True)

        self._call(reset)

    def set_latency(self, up_ms: float | None = None, down_ms: float | None = None) -> None:
        """Added one-way latency per direction (up: client to target), in ms."""
        if up_ms is not None:
            self._latency_s["up"] = up_ms / 1000
        if down_ms is not None:
            self._latency_s["down"] = down_ms / 1000

    def latency_s(self, direction: str) -> float:
        return self._latency_s[direction]

    @property
    def open_connections(self) -> int:
        return len(self._pipes)

    # -- inside the loop --------------------------------------------------------------------

    async def _shutdown(self) -> None:
        for pipe in list(self._pipes):
            pipe.close(reset=True)
        await asyncio.sleep(0)

    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            fn()
            done.set()

        self._loop.call_soon_threadsafe(run)
        if not done.wait(10):
            raise RuntimeError("TcpProxy loop did not answer within 10 s")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_total += 1
        pipe = _Pipe(self, (reader, writer))
        self._pipes.add(pipe)
        try:
            await pipe.run()
        finally:
            self._pipes.discard(pipe)
