"""The raw transport (loadgen.targets.transport): requests to one origin over a `RawPool`,
serialised here; each becomes a `RawExchange`."""

from __future__ import annotations

import ssl

from loadgen.target import Clock
from loadgen.targets.rawhttp import DEFAULT_KEEPALIVE_EXPIRY_S, RawExchange
from loadgen.targets.rawpool import RawPool
from loadgen.targets.transport import HttpRequest


class RawTransport:
    """Requests to one origin over a `RawPool`; the static part of each request head (request
    line, host, the target's fixed headers) is serialised once per method and path."""

    name = "raw"

    def __init__(
        self,
        host: str,
        port: int,
        host_header: str,
        headers: dict[str, str],
        *,
        ssl_context: ssl.SSLContext | None,
        max_connections: int,
        connect_timeout_s: float,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
    ) -> None:
        self.pool = RawPool(
            host,
            port,
            ssl_context=ssl_context,
            max_connections=max_connections,
            connect_timeout_s=connect_timeout_s,
            keepalive_expiry_s=keepalive_expiry_s,
        )
        self.connect_timeout_s = connect_timeout_s
        self._static = f"host: {host_header}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        self._prefixes: dict[tuple[str, str], bytes] = {}

    @property
    def reuse(self) -> bool:
        return self.pool.reuse

    @property
    def stale(self) -> int:
        return self.pool.stale

    def serialise(self, request: HttpRequest) -> bytes:
        """The request's bytes: head (ours, then the request's headers) and body."""
        key = (request.method, request.target)
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = f"{request.method} {request.target} HTTP/1.1\r\n{self._static}".encode(
                "latin-1"
            )
            self._prefixes[key] = prefix
        extra = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
        if not self.pool.reuse:  # the server closes after each response: say we know
            extra += "connection: close\r\n"
        if request.body or request.method != "GET":
            extra += f"content-length: {len(request.body)}\r\n"
        return b"%s%s\r\n%s" % (prefix, extra.encode("latin-1"), request.body)

    def exchange(
        self, request: HttpRequest, clock: Clock, deadline_s: float, idle_s: float
    ) -> RawExchange:
        return RawExchange(
            self.pool, self.serialise(request), clock, deadline_s, idle_s, request.end_marker
        )

    async def warm(self, connections: int, probe_target: str) -> None:
        await self.pool.warm(connections, self.connect_timeout_s)

    async def aclose(self) -> None:
        self.pool.close()
