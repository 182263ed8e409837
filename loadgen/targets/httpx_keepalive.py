"""Keep-alive for the httpx transport as the raw pool does it (loadgen.targets.rawpool): the
response's `Keep-Alive: timeout=` (less a margin) and `max=` set the pooled connection's expiry,
and a server that closes right after each response is learned from seeing its close (not from
stale re-sends). httpcore keeps its connections private: this module is the one place that
reaches into them (httpcore 1.0's `_pool._requests`, `_connection`, `_keepalive_expiry`,
`_network_stream`); where they differ, each function does nothing and says so by returning None
or False, and the transport falls back to httpcore's own rules.
"""

from __future__ import annotations

from typing import Any

import httpx

from loadgen.targets.http_common import KeepAlive
from loadgen.targets.rawpool import IDLE_TIMEOUT_SHARE
from loadgen.targets.resend import transport_socket


def request_connection(client: httpx.AsyncClient, request: Any) -> Any:
    """The HTTP/1.1 connection httpcore gave `request` (its own request object), or None."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    for pending in list(getattr(pool, "_requests", ())):
        if getattr(pending, "request", None) is request:
            return getattr(getattr(pending, "connection", None), "_connection", None)
    return None


def connection_socket(conn: Any) -> Any:
    """The socket under an httpcore connection, or None."""
    return transport_socket(getattr(conn, "_network_stream", None))


def apply_keep_alive(conn: Any, ka: KeepAlive, default_expiry_s: float) -> bool:
    """Set the connection's idle expiry from this response (httpcore starts it when the
    response closes): ours, shortened to IDLE_TIMEOUT_SHARE of an announced `timeout=`, and 0
    when `max=` allows no further request. False when the connection cannot be reached."""
    if conn is None or not hasattr(conn, "_keepalive_expiry"):
        return False
    expiry = default_expiry_s
    if ka.timeout_s is not None:
        expiry = min(expiry, ka.timeout_s * IDLE_TIMEOUT_SHARE)
    if ka.max_requests is not None and ka.max_requests <= 0:
        expiry = 0.0
    conn._keepalive_expiry = expiry
    return True


def closed_soon(conn: Any) -> bool:
    """Called QUICK_CLOSE_S after a response ended whole on `conn`: the server has closed it
    (httpcore closed it on finding it readable when the next request wanted it, or its idle
    socket shows the FIN now)."""
    stream: Any = getattr(conn, "_network_stream", None)
    try:
        if conn.is_closed():
            return True
        return bool(conn.is_idle()) and bool(stream.get_extra_info("is_readable"))
    except (AttributeError, OSError, RuntimeError, ValueError):
        return False
