"""An HTTP/1.1 reverse proxy for connection-fault tests, standing in for the gateway in front of an
engine: each request goes upstream on a fresh connection, and the client's side follows the
gateway's policy: close after every response (saying `Connection: close` or not), or keep alive
and silently close a connection idle longer than a timeout. Responses are passed on chunk by
chunk as they arrive (streams stay streams). Its asyncio loop runs in a thread:
`with HttpProxy(host, port, close_after_response=True) as p: ... p.port ...`.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.support.conntasks import ConnectionTasks
from tests.support.loopserver import LoopServer

_HOP_BY_HOP = {b"connection", b"keep-alive"}
_READ = 65536


class HttpProxy(LoopServer):
    """Forward 127.0.0.1:`port` (kernel-chosen) to the HTTP server at target_host:target_port.

    Counters (read them after the traffic): `connections` accepted, `requests` forwarded (and
    `request_ids`, each request's `x-peakload-request-id` in order, "" where absent),
    `closed_after_response` and `closed_idle` (client connections the proxy closed by policy),
    `upstream_failures` (responses cut short by the server)."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        close_after_response: bool = False,
        announce_close: bool = True,
        idle_timeout_s: float | None = None,
    ) -> None:
        super().__init__("httpproxy")
        self.target_host, self.target_port = target_host, target_port
        self.close_after_response = close_after_response
        self.announce_close = announce_close
        self.idle_timeout_s = idle_timeout_s
        self.port = 0
        self.connections = 0
        self.requests = 0
        self.request_ids: list[str] = []
        self.closed_after_response = 0
        self.closed_idle = 0
        self.upstream_failures = 0
        self._conns = ConnectionTasks()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- inside the loop --------------------------------------------------------------------

    async def _shutdown(self) -> None:
        await self._conns.cancel_all()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._conns.run(self._serve, reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                first = await asyncio.wait_for(reader.read(1), self.idle_timeout_s)
            except TimeoutError:
                self.closed_idle += 1  # FIN, no notice: as gateways do
                return
            if not first:
                return
            head = first + await reader.readuntil(b"\r\n\r\n")
            method, headers = _parse_head(head)
            body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
            self.requests += 1
            self.request_ids.append(headers.get(b"x-peakload-request-id", b"").decode("latin-1"))
            if not await self._forward(method, head + body, writer):
                self.upstream_failures += 1
                return
            if self.close_after_response:
                self.closed_after_response += 1
                return

    async def _forward(self, method: bytes, request: bytes, writer: asyncio.StreamWriter) -> bool:
        """One request on a fresh upstream connection, its response passed on as it arrives.
        False when the upstream broke the response off (the client's connection must close)."""
        up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        try:
            up_writer.write(request)
            await up_writer.drain()
            try:
                head = await up_reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return False
            status_line, _, _ = head.partition(b"\r\n")
            status = int(status_line.split()[1])
            _, headers = _parse_head(head)
            writer.write(self._rewrite(head))
            if method == b"HEAD" or status in (204, 304) or 100 <= status < 200:
                await writer.drain()
                return True
            if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                return await _copy_chunked(up_reader, writer)
            if b"content-length" in headers:
                return await _copy_exactly(up_reader, writer, int(headers[b"content-length"]))
            while data := await up_reader.read(_READ):  # delimited by the server's close
                writer.write(data)
                await writer.drain()
            return False
        except asyncio.IncompleteReadError:
            return False
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                up_writer.close()

    def _rewrite(self, head: bytes) -> bytes:
        """The upstream's head with its hop-by-hop connection headers replaced by ours."""
        lines = head.split(b"\r\n")[:-2]
        kept = [lines[0]] + [
            ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP
        ]
        if self.close_after_response:
            if self.announce_close:
                kept.append(b"Connection: close")
        else:
            kept.append(b"Connection: keep-alive")
        return b"\r\n".join(kept) + b"\r\n\r\n"


def _parse_head(head: bytes) -> tuple[bytes, dict[bytes, bytes]]:
    """(method or status-line's first word, headers by lower-case name)."""
    lines = head.split(b"\r\n")
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return lines[0].split(b" ", 1)[0], headers


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Pass a chunked body on chunk by chunk, through the last chunk and the trailers."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            rest = size_line
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                rest += line
            writer.write(rest + b"\r\n")
            await writer.drain()
            return True
        writer.write(size_line + await reader.readexactly(size + 2))
        await writer.drain()


async def _copy_exactly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bool:
    while n > 0:
        data = await reader.read(min(n, _READ))
        if not data:
            return False
        writer.write(data)
        await writer.drain()
        n -= len(data)
    return True
