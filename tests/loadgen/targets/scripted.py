"""A loopback HTTP/1.1 server for target tests that plays scripted byte sequences: each write is a
separate `transport.write` (with optional sleeps between, so the client sees separate reads),
plus resets, closes and hangs. It records every request and every connection it accepted."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import ssl
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.support.conntasks import ConnectionTasks
from tests.support.ports import free_port


@dataclass
class Sleep:
    seconds: float


@dataclass
class Reset:
    """Close with SO_LINGER 0: the client sees a TCP RST."""


@dataclass
class Close:
    """Close gracefully (FIN) after flushing."""


@dataclass
class Hang:
    """Send nothing more until the client goes away."""


Step = bytes | Sleep | Reset | Close | Hang


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int = 0  # which of the server's connections it came on (1 = the first)

    def json(self) -> Any:
        return json.loads(self.body)


Script = Callable[[Received], Iterable[Step]]


@dataclass
class ScriptedServer:
    script: Script
    host: str = "127.0.0.1"
    ssl_context: ssl.SSLContext | None = None
    requests: list[Received] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = None
    _conns: ConnectionTasks = field(default_factory=ConnectionTasks)

    @property
    def base_url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}/v1"

    async def __aenter__(self) -> ScriptedServer:
        self.port = free_port(self.host)
        self._server = await asyncio.start_server(
            functools.partial(self._conns.run, self._serve),
            self.host,
            self.port,
            ssl=self.ssl_context,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._conns.cancel_all()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        k, _, v = line.partition(":")
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                req = Received(method, path, headers, body, connection)
                self.requests.append(req)
                for step in self.script(req):
                    if isinstance(step, bytes):
                        writer.write(step)
                        await writer.drain()
                    elif isinstance(step, Sleep):
                        await asyncio.sleep(step.seconds)
                    elif isinstance(step, Reset):
                        sock = writer.get_extra_info("socket")
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        writer.transport.abort()
                        return
                    elif isinstance(step, Close):
                        writer.close()
                        return
                    else:
                        await reader.read()  # until the client closes
                        return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


# ------------------------------------------------------------- building responses


def head(
    status: int = 200,
    headers: dict[str, str] | None = None,
    *,
    content_type: str | None = "text/event-stream",
    chunked: bool = True,
    length: int | None = None,
) -> bytes:
    reason = {200: "OK", 302: "Found", 401: "Unauthorized", 404: "Not Found"}.get(status, "X")
    h = {} if content_type is None else {"content-type": content_type}
    if chunked:
        h["transfer-encoding"] = "chunked"
    elif length is not None:
        h["content-length"] = str(length)
    h.update(headers or {})
    return (
        f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    ).encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


END = b"0\r\n\r\n"


def sse(obj: Any) -> bytes:
    """One `data:` event for a JSON object (or `[DONE]`)."""
    payload = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def chat_delta(**delta: Any) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def usage_chunk(prompt: int, completion: int, reasoning: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return {"id": "x", "choices": [], "usage": usage}


def split_wire(wire: bytes, cuts: Iterable[int], gap_s: float = 0.0) -> list[Step]:
    """`wire` written in pieces cut at the given offsets, sleeping `gap_s` between writes."""
    steps: list[Step] = []
    last = 0
    for c in sorted(set(cuts)):
        if 0 < c < len(wire):
            steps.append(wire[last:c])
            if gap_s:
                steps.append(Sleep(gap_s))
            last = c
    steps.append(wire[last:])
    return steps
