"""Hosted-provider manners: `[pacing]` keeps a run under a provider's request and token limits
(the spec's, else the preset's published ones, else those its responses advertise in
`x-ratelimit-*` headers, with headroom), holds sends while the advertised remaining budget is
spent until its reset, and holds every send after a 429 until its Retry-After has passed. It
lives in a `Target` wrapper, so the runner is unchanged: the wait happens before the request
is sent, and the record shows it (`sent_ns` after the schedule; TTFT from the schedule
includes it, TTFT from send does not). A 429 stays a record; `retries` (done by
loadgen.engine.fold) sends it again as a separate attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from pydantic import BaseModel, ConfigDict, Field

from loadgen.errors import HttpStatusError
from loadgen.target import Clock, EventKind, PreparedRequest, RateLimit, StreamEvent, Target

DEFAULT_HEADROOM = 0.9  # use this share of a published limit: clocks and windows differ
DEFAULT_RETRY_AFTER_S = 1.0  # a 429 without Retry-After still pauses the sends this long
MAX_RETRY_AFTER_S = 120.0  # a Retry-After beyond this is the provider's, not a pause we take
MAX_SLEEP_NS = 100_000_000  # a waiting send looks again this often (a header may free it)
MINUTE_S = 60  # OpenAI's convention: an advertised x-ratelimit-limit-* counts per minute


class PacingSpec(BaseModel):
    """`[pacing]`: `enabled = true` paces sends to `requests_per_minute` / `tokens_per_minute`
    (default: the target preset's published limits, else the limits the provider's responses
    advertise in `x-ratelimit-limit-*`) x `headroom`. Tokens per request are its
    prompt tokens plus max_tokens (what providers count against a token limit up front)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    headroom: float = Field(default=DEFAULT_HEADROOM, gt=0, le=1)
    # a 429 retried up to this many times (loadgen.engine.fold): each retry a separate attempt with
    # its own record, sent after Retry-After and measured from the original schedule
    retries: int = Field(default=0, ge=0, le=10)


class Pacer:
    """Spacing of sends on one monotonic clock: request i may go no earlier than the previous
    one + 60 / rpm s, nor before the token allowance of the ones before it has refilled, nor
    before a Retry-After gate, nor while the provider's advertised remaining requests (tokens)
    are spent (below what the next request needs) until their reset. FIFO: acquisitions are
    served in the order they were asked. `rpm`/`tpm` are the effective rates (headroom and
    share applied); None = no such limit named, and then the provider's advertised limit
    (`x-ratelimit-limit-*`) x `headroom` x `share` is used once a response advertises one, and
    the sends made before it was known (those inside its window) are charged against it as if
    it had been known. `requests_window_s` / `tokens_window_s`: what the provider's advertised
    limits count over (its preset's `[ratelimit_headers]`; per minute by default). A limit
    over a window longer than a minute (Groq's requests: per day) is a budget, not a pace: it
    sets none; its `remaining` still holds sends until its reset."""

    def __init__(
        self,
        rpm: float | None,
        tpm: float | None,
        clock: Callable[[], int] = time.perf_counter_ns,
        *,
        headroom: float = DEFAULT_HEADROOM,
        share: float = 1.0,
        requests_window_s: float = MINUTE_S,
        tokens_window_s: float = MINUTE_S,
    ) -> None:
        self.requests_window_s = requests_window_s
        self.tokens_window_s = tokens_window_s
        self.req_gap_ns = int(60e9 / rpm) if rpm else 0
        self.ns_per_token = 60e9 / tpm if tpm else 0.0
        self.learns_rpm = not rpm
        self.learns_tpm = not tpm
        self.headroom = headroom
        self.share = share
        self.advertised: RateLimit | None = None  # the last advertised state seen
        self._clock = clock
        self._next_req = 0
        self._next_tok = 0
        self._gate = 0
        # the advertised remaining requests/tokens, less what was sent since; None = unknown
        self._req_left: float | None = None
        self._req_reset = 0
        self._tok_left: float | None = None
        self._tok_reset = 0
        self._last_send: int | None = None
        # (sent at, tokens) of the sends made while no token limit was known (the last minute's)
        self._unpaced: deque[tuple[int, int]] = deque()
        self._lock = asyncio.Lock()

    def due(self, now: int, tokens: int = 0) -> int:
        """When a request of `tokens` may go, given everything known at `now`."""
        at = max(now, self._next_req, self._next_tok, self._gate)
        if self._req_left is not None and self._req_left < 1:
            at = max(at, self._req_reset)
        if self._tok_left is not None and self._tok_left < tokens:
            at = max(at, self._tok_reset)
        return at

    def _expire(self, now: int) -> None:
        """Past its reset an advertised budget is full again: unknown until the next header."""
        if self._req_left is not None and now >= self._req_reset:
            self._req_left = None
        if self._tok_left is not None and now >= self._tok_reset:
            self._tok_left = None

    async def acquire(self, tokens: int) -> None:
        async with self._lock:
            while True:  # a 429 or a header arriving while we sleep moves the due time: look again
                now = self._clock()
                self._expire(now)
                at = self.due(now, tokens)
                if at <= now:
                    break
                await asyncio.sleep(min(at - now, MAX_SLEEP_NS) / 1e9)
            now = self._clock()
            self._last_send = now
            self._next_req = now + self.req_gap_ns
            self._next_tok = max(self._next_tok, now) + int(tokens * self.ns_per_token)
            if not self.ns_per_token:
                self._unpaced.append((now, tokens))
                window_ns = int(self.tokens_window_s * 1e9)
                while self._unpaced and self._unpaced[0][0] < now - window_ns:
                    self._unpaced.popleft()
            if self._req_left is not None:
                self._req_left -= 1
            if self._tok_left is not None:
                self._tok_left -= tokens

    def back_off(self, retry_after_s: float | None) -> None:
        """A 429: no send until Retry-After (or a second when the server named none)."""
        wait = DEFAULT_RETRY_AFTER_S if retry_after_s is None else retry_after_s
        self._gate = max(self._gate, self._clock() + _ns(wait))

    def observe(self, limits: RateLimit) -> None:
        """A response's advertised rate-limit state: the remaining budgets (held until their
        reset once spent) and, where no limit was named, the advertised limits as the pace."""
        now = self._clock()
        self.advertised = limits
        if limits.remaining_requests is not None:
            self._req_left = limits.remaining_requests
            self._req_reset = now + _ns(_reset_or_default(limits.reset_requests_s))
        if limits.remaining_tokens is not None:
            self._tok_left = limits.remaining_tokens
            self._tok_reset = now + _ns(_reset_or_default(limits.reset_tokens_s))
        scale = self.headroom * self.share
        req_window, tok_window = self.requests_window_s, self.tokens_window_s
        if self.learns_rpm and limits.limit_requests and req_window <= MINUTE_S:
            self.req_gap_ns = int(req_window * 1e9 / (limits.limit_requests * scale))
            if self._last_send is not None:  # the gap runs from the send before it was known
                self._next_req = max(self._next_req, self._last_send + self.req_gap_ns)
        if self.learns_tpm and limits.limit_tokens and tok_window <= MINUTE_S:
            self.ns_per_token = tok_window * 1e9 / (limits.limit_tokens * scale)
            self._charge_unpaced()

    def _charge_unpaced(self) -> None:
        """The token pace replayed over the sends made before it was known: the next send is
        due where it would have been had the pace held from the first of them."""
        due = 0
        for at, tokens in self._unpaced:
            due = max(due, at) + int(tokens * self.ns_per_token)
        self._unpaced.clear()
        self._next_tok = max(self._next_tok, due)


def _reset_or_default(reset_s: float | None) -> float:
    return DEFAULT_RETRY_AFTER_S if reset_s is None else reset_s


def _ns(seconds: float) -> int:
    """A pause we take, in ns: at most MAX_RETRY_AFTER_S (a longer one is the provider's)."""
    return int(min(max(seconds, 0.0), MAX_RETRY_AFTER_S) * 1e9)


def effective_limits(
    spec: PacingSpec, published_rpm: float | None, published_tpm: float | None
) -> tuple[float | None, float | None]:
    """(requests, tokens) per minute the pacer keeps to: the spec's, else the published ones,
    times the headroom."""
    rpm = spec.requests_per_minute or published_rpm or None
    tpm = spec.tokens_per_minute or published_tpm or None
    return (
        rpm * spec.headroom if rpm else None,
        tpm * spec.headroom if tpm else None,
    )


class PacedTarget:
    """A Target whose sends wait for `pacer`; each response's advertised rate limits go to the
    pacer, and a 429 from the inner target moves its gate and is raised on unchanged (the
    runner records it)."""

    def __init__(self, inner: Target, pacer: Pacer) -> None:
        self.inner = inner
        self.pacer = pacer

    async def stream(self, request: PreparedRequest, clock: Clock) -> AsyncIterator[StreamEvent]:
        await self.pacer.acquire((request.prompt_tokens or 0) + (request.max_tokens or 0))
        try:
            async for ev in self.inner.stream(request, clock):
                if ev.kind is EventKind.HEADERS and ev.ratelimit is not None:
                    self.pacer.observe(ev.ratelimit)
                yield ev
        except HttpStatusError as exc:
            if exc.status == 429:
                self.pacer.back_off(exc.retry_after_s)
            raise

    async def warm(self, connections: int) -> None:
        await self.inner.warm(connections)

    async def aclose(self) -> None:
        await self.inner.aclose()
