"""The one reader of a provider's advertised rate limits: the OpenAI-style `x-ratelimit-*`
headers (limit, remaining and reset, for requests and for tokens) and `retry-after`. Only
these headers are read; nothing else of a response's head is kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from loadgen.target import RateLimit
from loadgen.targets.http_common import parse_retry_after

RATE_LIMIT_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "retry-after",
)

_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:h|ms|m|s|us|µs|ns))+")


def parse_duration(value: str | None) -> float | None:
    """A reset as seconds: a Go-style duration ("1s", "6m0s", "59.6ms", "2m59.56s", "1h2m")
    or plain seconds ("20", "0.5"); None when absent, negative or unreadable."""
    if value is None:
        return None
    text = value.strip().lower()
    if not text:
        return None
    try:
        plain = float(text)
    except ValueError:
        pass
    else:
        return plain if math.isfinite(plain) and plain >= 0 else None
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_S[unit] for n, unit in _PART.findall(text))


def _count(value: str | None) -> float | None:
    """A limit or remaining count (non-negative number), else None."""
    if value is None:
        return None
    try:
        n = float(value.strip())
    except ValueError:
        return None
    return n if math.isfinite(n) and n >= 0 else None


def rate_limit_of(headers: Mapping[str, str]) -> RateLimit | None:
    """The rate-limit state a response advertises (header names lower-case, as the transports
    give them), None when it carries none of RATE_LIMIT_HEADERS."""
    if not any(name in headers for name in RATE_LIMIT_HEADERS):
        return None
    get = headers.get
    return RateLimit(
        limit_requests=_count(get("x-ratelimit-limit-requests")),
        remaining_requests=_count(get("x-ratelimit-remaining-requests")),
        reset_requests_s=parse_duration(get("x-ratelimit-reset-requests")),
        limit_tokens=_count(get("x-ratelimit-limit-tokens")),
        remaining_tokens=_count(get("x-ratelimit-remaining-tokens")),
        reset_tokens_s=parse_duration(get("x-ratelimit-reset-tokens")),
        retry_after_s=parse_retry_after(get("retry-after")),
    )
