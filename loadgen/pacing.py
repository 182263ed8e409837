"""Hosted-provider manners: `[pacing]` keeps a run under a provider's request and token limits
(the spec's, else the preset's published ones, with headroom) and holds every send after a
429 until its Retry-After has passed. It lives in a `Target` wrapper, so the runner is
unchanged: the wait happens before the request is sent, and the record shows it (`sent_ns`
after the schedule; TTFT from the schedule includes it, TTFT from send does not). A 429 stays
a record; `retries` (done by loadgen.fold) sends it again as a separate attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from loadgen.errors import HttpStatusError
from loadgen.target import Clock, PreparedRequest, StreamEvent, Target

if TYPE_CHECKING:
    from loadgen.spec import RunSpec

DEFAULT_HEADROOM = 0.9  # use this share of a published limit: clocks and windows differ
DEFAULT_RETRY_AFTER_S = 1.0  # a 429 without Retry-After still pauses the sends this long
MAX_RETRY_AFTER_S = 120.0  # a Retry-After beyond this is the provider's, not a pause we take


class PacingSpec(BaseModel):
    """`[pacing]`: `enabled = true` paces sends to `requests_per_minute` / `tokens_per_minute`
    (default: the target preset's published limits) x `headroom`. Tokens per request are its
    prompt tokens plus max_tokens (what providers count against a token limit up front)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    headroom: float = Field(default=DEFAULT_HEADROOM, gt=0, le=1)
    # a 429 retried up to this many times (loadgen.fold): each retry a separate attempt with
    # its own record, sent after Retry-After and measured from the original schedule
    retries: int = Field(default=0, ge=0, le=10)


class Pacer:
    """Spacing of sends on one monotonic clock: request i may go no earlier than the previous
    one + 60 / rpm s, nor before the token allowance of the ones before it has refilled, nor
    before a Retry-After gate. FIFO: acquisitions are served in the order they were asked.
    `rpm`/`tpm` are the effective rates (headroom applied); None = no such limit."""

    def __init__(
        self,
        rpm: float | None,
        tpm: float | None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.req_gap_ns = int(60e9 / rpm) if rpm else 0
        self.ns_per_token = 60e9 / tpm if tpm else 0.0
        self._clock = clock
        self._next_req = 0
        self._next_tok = 0
        self._gate = 0
        self._lock = asyncio.Lock()

    def due(self, now: int) -> int:
        return max(now, self._next_req, self._next_tok, self._gate)

    async def acquire(self, tokens: int) -> None:
        async with self._lock:
            while True:  # a 429 arriving while we sleep moves the gate: look again
                now = self._clock()
                at = self.due(now)
                if at <= now:
                    break
                await asyncio.sleep((at - now) / 1e9)
            now = self._clock()
            self._next_req = now + self.req_gap_ns
            self._next_tok = max(self._next_tok, now) + int(tokens * self.ns_per_token)

    def back_off(self, retry_after_s: float | None) -> None:
        """A 429: no send until Retry-After (or a second when the server named none)."""
        wait = DEFAULT_RETRY_AFTER_S if retry_after_s is None else retry_after_s
        self._gate = max(self._gate, self._clock() + int(min(wait, MAX_RETRY_AFTER_S) * 1e9))


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


def paced_by(spec: RunSpec, share: float) -> Pacer | None:
    """The pacer for `share` (0-1] of the run's load, or None when the spec does not pace.
    Limits: the spec's, else its target preset's published ones (loadgen.presets)."""
    if not spec.pacing.enabled:
        return None
    from loadgen.presets import load_preset

    limits = load_preset(spec.target.preset).limits if spec.target.preset else None
    rpm, tpm = effective_limits(
        spec.pacing,
        float(limits.requests_per_minute) if limits and limits.requests_per_minute else None,
        float(limits.tokens_per_minute) if limits and limits.tokens_per_minute else None,
    )
    return Pacer(rpm * share if rpm else None, tpm * share if tpm else None)


class PacedTarget:
    """A Target whose sends wait for `pacer`; a 429 from the inner target moves the pacer's
    gate and is raised on unchanged (the runner records it)."""

    def __init__(self, inner: Target, pacer: Pacer) -> None:
        self.inner = inner
        self.pacer = pacer

    async def stream(self, request: PreparedRequest, clock: Clock) -> AsyncIterator[StreamEvent]:
        await self.pacer.acquire((request.prompt_tokens or 0) + (request.max_tokens or 0))
        try:
            async for ev in self.inner.stream(request, clock):
                yield ev
        except HttpStatusError as exc:
            if exc.status == 429:
                self.pacer.back_off(exc.retry_after_s)
            raise

    async def warm(self, connections: int) -> None:
        await self.inner.warm(connections)

    async def aclose(self) -> None:
        await self.inner.aclose()
