"""httpx's and httpcore's errors as the transport contract's (loadgen.targets.transport), with
short details that carry no key or URL query."""

from __future__ import annotations

import httpx

from loadgen.errors import PhaseTimeout, TransportError
from loadgen.targets.http_common import (
    ConnectFailed,
    StreamReset,
    StreamTruncated,
    connect_error,
)


def translate(e: httpx.TransportError, where: str) -> TransportError:
    """httpx/httpcore errors -> our transport errors, with short key-free details."""
    if isinstance(e, httpx.ConnectTimeout):
        return PhaseTimeout("connect", "no connection within the connect timeout")
    if isinstance(e, httpx.PoolTimeout):
        return PhaseTimeout("connect", "no free connection in the pool by the deadline")
    if isinstance(e, httpx.ReadTimeout):
        if where == "body":
            return PhaseTimeout("idle", "no bytes within the idle timeout")
        return PhaseTimeout("headers", "deadline passed (no response headers)")
    if isinstance(e, httpx.TimeoutException):
        return PhaseTimeout("deadline" if where == "body" else "headers", type(e).__name__)
    if isinstance(e, httpx.ConnectError):
        cause: BaseException | None = e
        while cause is not None and (
            not isinstance(cause, OSError) or type(cause) is OSError  # anyio's generic wrapper
        ):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            cause = e.__cause__ or e.__context__
        url = e.request.url if _has_request(e) else None
        host = url.host if url is not None else "?"
        port = (url.port or (443 if url.scheme == "https" else 80)) if url is not None else 0
        if isinstance(cause, OSError):
            return connect_error(cause, host, port)
        return ConnectFailed(f"cannot connect to {host}:{port}: {str(e)[:120]}")
    if isinstance(e, httpx.RemoteProtocolError):
        return StreamTruncated(f"server closed or broke the response in {where}: {str(e)[:120]}")
    return StreamReset(f"connection error in {where} ({type(e).__name__})")


def _has_request(e: httpx.TransportError) -> bool:
    try:
        e.request  # noqa: B018 - raises RuntimeError when no request is attached
    except RuntimeError:
        return False
    return True
