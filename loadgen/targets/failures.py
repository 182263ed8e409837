"""The one place where an exception raised while streaming becomes a record's failure fields:
`classify(exc) -> (Outcome, error_phase, http_status, detail)`. Details are short and key-free.

`error_phase` by outcome: TIMEOUT -> connect | headers | first_token | idle | deadline;
STREAM_ERROR -> connect (refused, DNS, TLS) | in_band | reset | truncated | protocol | internal
(an unexpected exception: a bug to report, recorded rather than lost); HTTP_ERROR -> None;
CANCELLED -> None.
"""

from __future__ import annotations

import asyncio

import httpx

from loadgen.errors import (
    HttpStatusError,
    InBandError,
    PhaseTimeout,
    StreamProtocolError,
    TransportError,
)
from loadgen.results.records import Outcome
from loadgen.scrub import scrub
from loadgen.targets.http_common import ConnectFailed, StreamReset, StreamTruncated
from loadgen.targets.structured import StructuredOutputError

MAX_DETAIL = 240

Failure = tuple[Outcome, str | None, int | None, str]


def redact(text: str) -> str:
    """`text` scrubbed (loadgen.scrub: known secrets in any echo form, anything shaped like a
    credential), on one line, cut to MAX_DETAIL characters."""
    text = " ".join(scrub(text).split())
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def classify(exc: BaseException) -> Failure:
    """Map any exception from `Target.stream` (ours, httpx's, OSError, TimeoutError,
    CancelledError, or an unexpected bug) to `(outcome, error_phase, http_status, detail)`."""
    if isinstance(exc, asyncio.CancelledError):
        return Outcome.CANCELLED, None, None, "cancelled while in flight"
    if isinstance(exc, TransportError):
        return _ours(exc)
    if isinstance(exc, httpx.TimeoutException):
        phase = "connect" if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout) else "idle"
        return Outcome.TIMEOUT, phase, None, redact(f"{type(exc).__name__}")
    if isinstance(exc, httpx.ConnectError):
        return Outcome.STREAM_ERROR, "connect", None, redact(f"cannot connect: {exc}")
    if isinstance(exc, httpx.RemoteProtocolError):
        return Outcome.STREAM_ERROR, "truncated", None, redact(f"{exc}")
    if isinstance(exc, httpx.TransportError):
        return Outcome.STREAM_ERROR, "reset", None, redact(type(exc).__name__)
    if isinstance(exc, TimeoutError):  # also asyncio.TimeoutError (an alias since 3.11)
        return Outcome.TIMEOUT, "deadline", None, "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return Outcome.STREAM_ERROR, "connect", None, "connection refused"
    if isinstance(exc, ConnectionError | EOFError):
        return (
            Outcome.STREAM_ERROR,
            "reset",
            None,
            redact(f"connection lost ({type(exc).__name__})"),
        )
    if isinstance(exc, OSError):
        detail = f"{type(exc).__name__}: {exc.strerror or ''}"
        return Outcome.STREAM_ERROR, "connect", None, redact(detail)
    return Outcome.STREAM_ERROR, "internal", None, redact(f"internal error: {type(exc).__name__}")


def _ours(exc: TransportError) -> Failure:
    detail = redact(exc.detail)
    if isinstance(exc, HttpStatusError):
        return Outcome.HTTP_ERROR, None, exc.status, detail
    if isinstance(exc, PhaseTimeout):
        return Outcome.TIMEOUT, exc.phase, None, detail
    if isinstance(exc, StructuredOutputError):  # the answer broke the requested schema
        return Outcome.STREAM_ERROR, "schema", None, detail
    if isinstance(exc, InBandError):
        return Outcome.STREAM_ERROR, "in_band", None, detail
    if isinstance(exc, ConnectFailed):
        return Outcome.STREAM_ERROR, "connect", None, detail
    if isinstance(exc, StreamReset):
        return Outcome.STREAM_ERROR, "reset", None, detail
    if isinstance(exc, StreamTruncated):
        return Outcome.STREAM_ERROR, "truncated", None, detail
    if isinstance(exc, StreamProtocolError):
        return Outcome.STREAM_ERROR, "protocol", None, detail
    return Outcome.STREAM_ERROR, "protocol", None, detail
