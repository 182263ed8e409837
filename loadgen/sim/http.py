"""Minimal HTTP/1.1 for the simulated engine: an incremental request parser (Content-Length
bodies, keep-alive, pipelining) and response heads; no framework on the hot path.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


class HttpParseError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(slots=True)
class Request:
    """One parsed request. `headers_ns`: monotonic ns (perf_counter_ns) of the read that completed
    the head; `received_ns`: of the read that completed the body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    headers_ns: int
    received_ns: int
    target: str = ""  # the request line's target as sent: path and query


class RequestParser:
    """Feed it reads (with their arrival time); it yields complete requests in order."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._head: tuple[str, str, dict[str, str], bool, int, int] | None = None
        self.ready: deque[Request] = deque()
        self.expect_continue = False  # a head asked `Expect: 100-continue`; answer it now

    def feed(self, data: bytes, now_ns: int) -> None:
        """Parse as much as possible. Raises HttpParseError on a malformed request."""
        self._buf += data
        while True:
            if self._head is None:
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > MAX_HEAD_BYTES:
                        raise HttpParseError(431, "request head too large")
                    return
                self._head = _parse_head(bytes(self._buf[:end]), now_ns)
                del self._buf[: end + 4]
                if (
                    self._head[4] > len(self._buf)
                    and "100-continue" in self._head[2].get("expect", "").lower()
                ):
                    self.expect_continue = True
            method, target, headers, keep_alive, length, headers_ns = self._head
            path = target.split("?", 1)[0]
            if len(self._buf) < length:
                return
            body = bytes(self._buf[:length])
            del self._buf[:length]
            self._head = None
            self.ready.append(
                Request(method, path, headers, body, keep_alive, headers_ns, now_ns, target)
            )


def _parse_head(head: bytes, now_ns: int) -> tuple[str, str, dict[str, str], bool, int, int]:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise HttpParseError(400, "undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpParseError(400, f"malformed request line {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpParseError(400, f"malformed header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpParseError(400, "chunked request bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpParseError(400, "Content-Length is not an integer") from None
    if length < 0:
        raise HttpParseError(400, "negative Content-Length")
    if length > MAX_BODY_BYTES:
        raise HttpParseError(413, f"request body over {MAX_BODY_BYTES} bytes")
    conn = headers.get("connection", "").lower()
    keep_alive = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
    return method, target, headers, keep_alive, length, now_ns


def response_head(
    status: int,
    content_type: str,
    *,
    length: int | None,
    keep_alive: bool,
    extra: dict[str, str] | None = None,
    keepalive_header: str = "",
) -> bytes:
    """Status line and headers; `length=None` means a chunked body. `keepalive_header`, when
    set, is sent as `Keep-Alive:` on responses that keep the connection (whether or not the
    server then honours it)."""
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", f"content-type: {content_type}"]
    if length is None:
        lines.append("transfer-encoding: chunked")
        lines.append("cache-control: no-cache")
    else:
        lines.append(f"content-length: {length}")
    if not keep_alive:
        lines.append("connection: close")
    elif keepalive_header:
        lines.append(f"keep-alive: {keepalive_header}")
    for k, v in (extra or {}).items():
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (chunked transfer encoding) carrying `data` (non-empty)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
