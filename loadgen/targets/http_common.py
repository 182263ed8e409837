"""What both HTTP transports share: the response head, the transport-level error subclasses
(connect failure, reset, truncation), Retry-After parsing, and URL parts for display."""

from __future__ import annotations

import email.utils
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from loadgen.errors import StreamProtocolError, TransportError


class ConnectFailed(TransportError):
    """No connection: refused, DNS failure, unreachable network, TLS handshake failure."""


class StreamReset(StreamProtocolError):
    """The connection was reset (RST / OS error) mid-exchange."""


class StreamTruncated(StreamProtocolError):
    """The server closed the connection, or the stream ended, before the response was complete."""


class StaleConnection(StreamTruncated):
    """A request sent on a kept-alive connection got not one byte back before the connection
    closed or was reset: the server had closed it (or was closing it) when we sent. The request
    can be sent again once on a new connection; a new connection that fails is the server's.
    `reach`: whether the request reached the server (loadgen.targets.resend), None: unknown."""

    reach: bool | None = None


@dataclass(slots=True)
class KeepAlive:
    """What a response says about its connection (RFC 9112 §9.3; the `Keep-Alive` header)."""

    persistent: bool
    timeout_s: float | None = None  # `Keep-Alive: timeout=N`
    max_requests: int | None = None  # `Keep-Alive: max=N`: further requests it will take


def keep_alive(version: str, headers: dict[str, str]) -> KeepAlive:
    """HTTP/1.1 persists unless `Connection: close`; HTTP/1.0 only with `keep-alive`."""
    options = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if "close" in options:
        return KeepAlive(False)
    if version == "HTTP/1.0" and "keep-alive" not in options:
        return KeepAlive(False)
    ka = KeepAlive(True)
    for param in headers.get("keep-alive", "").split(","):
        name, _, value = param.partition("=")
        name, value = name.strip().lower(), value.strip().strip('"')
        try:
            if name == "timeout":
                ka.timeout_s = max(float(value), 0.0)
            elif name == "max":
                ka.max_requests = max(int(value), 0)
        except ValueError:
            continue  # a malformed parameter says nothing
    return ka


@dataclass(slots=True)
class ResponseHead:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    version: str
    t_ns: int  # arrival of the read that completed the head (monotonic ns)


def parse_head(raw: bytes, t_ns: int) -> ResponseHead:
    """Parse a status line + header block (without the final blank line)."""
    lines = raw.split(b"\r\n")
    status_line = lines[0]
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise StreamProtocolError(
            f"not an HTTP/1.x response: {status_line[:40].decode('latin-1')!r}", t_ns=t_ns
        )
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise StreamProtocolError("malformed response header line", t_ns=t_ns)
        key = name.strip().lower().decode("latin-1")
        val = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {val}" if key in headers else val
    return ResponseHead(int(parts[1]), headers, parts[0].decode("latin-1"), t_ns)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date relative to now), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    # a wall-clock difference by definition (the header is a date), not a measured duration
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def connect_error(e: OSError, host: str, port: int) -> ConnectFailed:
    """A short, key-free description of why a connection could not be made."""
    where = f"{host}:{port}"
    if isinstance(e, socket.gaierror):
        return ConnectFailed(f"DNS lookup failed for {host}")
    if isinstance(e, ConnectionRefusedError):
        return ConnectFailed(f"connection refused by {where}")
    if isinstance(e, ssl.SSLError):
        return ConnectFailed(f"TLS handshake with {where} failed: {e.reason or type(e).__name__}")
    return ConnectFailed(f"cannot connect to {where}: {e.strerror or type(e).__name__}")


def display_url(url: str) -> str:
    """The URL without query or credentials, for messages."""
    p = urlsplit(url)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{p.port}" if p.port else ""
    return f"{p.scheme}://{host}{port}{p.path}{'?…' if p.query else ''}"


async def read_some(body: AsyncIterator[tuple[int, bytes]], limit: int) -> bytes:
    """Up to `limit` bytes of a response body (for error details); gives up quietly on a
    transport failure (EOF, reset, timeout): what arrived is all there is to show."""
    parts: list[bytes] = []
    size = 0
    try:
        async for _, data in body:
            parts.append(data)
            size += len(data)
            if size >= limit:
                break
    except TransportError:
        pass
    return b"".join(parts)[:limit]
