"""The seam between the runner and an endpoint: a `Target` turns one `PreparedRequest` into a
stream of `StreamEvent`s, each stamped with the arrival time of the bytes that carried it.

A target speaks the API (HTTP, SSE/NDJSON, JSON); it never decides *when* to send and never reads
the clock on its own: the runner injects `clock` (monotonic ns) and the target calls it once per
network read, before any parsing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

Clock = Callable[[], int]
"""Monotonic nanoseconds (`time.perf_counter_ns` in production; injectable in tests)."""


class EventKind(IntEnum):
    SENT = 0  # the request's bytes were handed to the socket (t_ns = send time)
    HEADERS = 1  # response status line and headers arrived; `status` (and `ratelimit`) set
    CONTENT = 2  # an answer delta; `text` set, `tokens` = tokens it carries (>= 1)
    REASONING = 3  # a reasoning delta (reasoning_content / reasoning)
    TOOL_CALL = 4  # a tool-call delta (counts as output)
    USAGE = 5  # the server's usage block; `usage` set
    ERROR = 6  # an in-band error event; `text` holds the server's message (truncated)
    DONE = 7  # the stream ended properly ([DONE], or a complete non-streaming body)
    RESENT = 8  # a reused connection died before any response byte: sent again on a new one


@dataclass(slots=True)
class ServerTimings:
    """The server's own account of one request, where its API reports one (llama.cpp's
    `timings`, Ollama's `*_duration`, TGI's `x-*-time` headers). ms on the server's clock;
    None where that server does not say."""

    prompt_tokens: int | None = None  # prompt tokens the server evaluated (after its cache)
    prefill_ms: float | None = None  # time to evaluate them
    decode_tokens: int | None = None  # tokens it generated
    decode_ms: float | None = None  # time to generate them (first to last)
    cached_tokens: int | None = None  # prompt tokens served from its prefix cache
    queue_ms: float | None = None  # time waiting for a slot before prefill

    @property
    def ms_per_token(self) -> float | None:
        """Server time per generated token: decode_ms / decode_tokens."""
        if self.decode_ms is None or not self.decode_tokens:
            return None
        return self.decode_ms / self.decode_tokens


@dataclass(slots=True, frozen=True)
class RateLimit:
    """A provider's advertised rate-limit state on one response: the `x-ratelimit-*` headers
    (OpenAI, Groq, Together, Fireworks) and `retry-after`, parsed by loadgen.targets.ratelimit.
    Limits and remaining counts as sent; resets in seconds from the response; None where the
    header was absent or unreadable."""

    limit_requests: float | None = None
    remaining_requests: float | None = None
    reset_requests_s: float | None = None
    limit_tokens: float | None = None
    remaining_tokens: float | None = None
    reset_tokens_s: float | None = None
    retry_after_s: float | None = None


@dataclass(slots=True)
class AudioFacts:
    """What one audio response amounted to (loadgen.targets.audio decodes it): speech's audio
    decoded from the bytes received, a transcription's transcript. None where not known."""

    duration_ms: float | None = None  # decoded length of the audio (not the byte count)
    audio_bytes: int | None = None  # audio bytes received (SSE: after base64 decoding)
    words: int | None = None  # words of the transcript (whitespace-separated)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None  # prompt_tokens_details.cached_tokens (prefix cache hits)
    server: ServerTimings | None = None  # the server's own timings, when it reports them
    audio: AudioFacts | None = None  # speech and transcription APIs (loadgen.targets.apis)


@dataclass(slots=True)
class StreamEvent:
    kind: EventKind
    t_ns: int  # arrival of the read that carried this event, monotonic ns
    text: str = ""
    tokens: int = 0
    status: int = 0
    usage: Usage | None = None
    retry_after_s: float | None = None
    spread_ns: int = -1
    """How much earlier than `t_ns` an output event may have arrived: 0 when the stamp is the
    kernel's for these very bytes; when several token events came in one kernel-stamped read,
    `t_ns` less the earliest their bytes can have come (after the socket was last drained, and
    after what the event loop's own iterations rule out if it was woken on time, see
    loadgen/targets/loopwatch.py), at least 1; -1 when the stamp was taken in user space (then
    the event loop's lag bounds it)."""
    wake_spread_ns: int = -1
    """`spread_ns` without assuming the loop was woken on time (as large or larger): what the
    self-check judges by the loop-lag probe when only a late wake-up can make it off."""
    connect_ns: int = -1
    """On SENT: ns spent opening a new connection (TCP, TLS) inside this request; -1 when an
    idle kept-alive connection was reused."""
    choice: int = 0
    """On output events: which of the `n` choices (completions) this delta belongs to."""
    ratelimit: RateLimit | None = None
    """On HEADERS: the provider's advertised rate-limit headers, None when it sent none."""


@dataclass(slots=True)
class PreparedRequest:
    """Everything needed to send one request; built by the workload, never by the target.

    `body` is the JSON payload without `stream`/`model` decisions left open: targets send it as is.
    `deadline_s` bounds the whole request; `idle_timeout_s` bounds the gap between two reads.
    """

    request_id: str
    body: dict[str, Any]
    prompt_tokens: int | None = None
    max_tokens: int | None = None
    deadline_s: float = 600.0
    idle_timeout_s: float = 60.0
    headers: dict[str, str] = field(default_factory=dict)


class Target(Protocol):
    """One streaming method. Failures surface as exceptions from `loadgen.errors`'s transport
    family (or the underlying library's); the runner maps them to a record's outcome."""

    def stream(self, request: PreparedRequest, clock: Clock) -> AsyncIterator[StreamEvent]: ...

    async def warm(self, connections: int) -> None:
        """Open up to `connections` keep-alive connections before the start (no requests)."""
        ...

    async def aclose(self) -> None: ...
