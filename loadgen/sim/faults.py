"""Which fault a request gets: forced by the `x-peakload-sim-fault` header, else drawn from the
configured rates by a hash of (seed, request id) — so a seed and the same request ids give the
same faults whatever the arrival order — and the requests-per-second budget (429 beyond it).
"""

from __future__ import annotations

import hashlib
import math
import time

from loadgen.errors import SpecError
from loadgen.sim.config import FAULT_DEFAULT_ARG, FaultKind, SimConfig, parse_fault_kind
from loadgen.sim.text import BadRequest

FAULT_HEADER = "x-peakload-sim-fault"
Faults = dict[FaultKind, float | None]


def unit_hash(seed: int, request_id: str, salt: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, request_id, salt)."""
    digest = hashlib.blake2b(f"{seed}/{request_id}/{salt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def parse_fault_header(value: str) -> Faults:
    """`kind[:arg][, kind[:arg]...]`, e.g. `reset:5` or `multi_token:3, utf8_split`."""
    faults: Faults = {}
    for item in value.split(","):
        if not item.strip():
            continue
        name, _, arg_text = item.strip().partition(":")
        try:
            kind = parse_fault_kind(name, FAULT_HEADER)
        except SpecError as e:
            raise BadRequest(str(e)) from None
        if arg_text:
            try:
                arg = float(arg_text)
            except ValueError:
                raise BadRequest(f"{FAULT_HEADER}: argument of {name!r} must be a number") from None
            if not math.isfinite(arg) or arg < 0:
                raise BadRequest(f"{FAULT_HEADER}: argument of {name!r} must be >= 0")
            faults[kind] = arg
        else:
            faults[kind] = FAULT_DEFAULT_ARG[kind]
    return faults


def choose_faults(cfg: SimConfig, request_id: str, arrival: int, header: str | None) -> Faults:
    """The header's faults if present (rates are then not drawn), else at most one fault drawn
    from the request id or the arrival number (1 for the first request), as cfg.fault_draw says."""
    if header is not None:
        return parse_fault_header(header)
    if not cfg.faults:
        return {}
    key = request_id if cfg.fault_draw == "request" else f"arrival-{arrival}"
    u = unit_hash(cfg.seed, key, "fault")
    acc = 0.0
    for rule in cfg.faults:
        acc += rule.rate
        if u < acc:
            return {rule.kind: rule.effective_arg}
    return {}


def describe(faults: Faults) -> list[str]:
    """`["kind:arg", ...]` as written to the truth log (arg omitted when the kind takes none)."""
    return [k.value if a is None else f"{k.value}:{a:g}" for k, a in faults.items()]


class RateBudget:
    """A token bucket of `rps` units per second holding at most `burst` (monotonic clock);
    rps 0 = no budget."""

    def __init__(self, rps: float, burst: float, now_ns: int | None = None) -> None:
        self.rps = rps
        self.burst = burst if burst > 0 else max(rps, 1.0)
        self._tokens = self.burst
        self._last_ns = time.perf_counter_ns() if now_ns is None else now_ns

    def _refill(self, now_ns: int) -> None:
        elapsed_ns = max(0, now_ns - self._last_ns)
        self._tokens = min(self.burst, self._tokens + elapsed_ns / 1e9 * self.rps)
        self._last_ns = max(now_ns, self._last_ns)

    def wait_s(self, now_ns: int, n: float = 1.0) -> float | None:
        """None if `n` units fit now; otherwise the seconds until they would."""
        if self.rps <= 0:
            return None
        self._refill(now_ns)
        return None if self._tokens >= n else (n - self._tokens) / self.rps

    def take(self, now_ns: int, n: float = 1.0) -> float | None:
        """Take `n` units if they fit (None); otherwise the seconds until they would."""
        wait = self.wait_s(now_ns, n)
        if wait is None and self.rps > 0:
            self._tokens -= n
        return wait

    def remaining(self) -> int:
        """Whole units in the bucket as of the last call."""
        return max(0, math.floor(self._tokens))

    def reset_s(self) -> float:
        """Seconds until the bucket is full again, as of the last call."""
        return (self.burst - self._tokens) / self.rps if self.rps > 0 else 0.0


class RateLimiter:
    """The simulated provider's limits: a requests bucket and a tokens bucket (prompt +
    max_tokens charged on arrival); a request is admitted only when both have room. When the
    config says so, `headers` advertises both as providers do (OpenAI's x-ratelimit-*: limit
    per minute, remaining now, reset until the bucket is full)."""

    def __init__(self, cfg: SimConfig, now_ns: int | None = None) -> None:
        self.requests = RateBudget(cfg.rate_limit_rps, cfg.rate_limit_burst, now_ns)
        self.tokens = RateBudget(cfg.rate_limit_tokens_per_s, cfg.rate_limit_token_burst, now_ns)
        self.advertise = cfg.rate_limit_headers

    def admit(self, now_ns: int, tokens: int) -> float | None:
        """None (and both budgets charged) if the request fits, else the seconds until it would."""
        waits = [
            w
            for w in (self.requests.wait_s(now_ns), self.tokens.wait_s(now_ns, tokens))
            if w is not None
        ]
        if waits:
            return max(waits)
        self.requests.take(now_ns)
        self.tokens.take(now_ns, tokens)
        return None

    def headers(self) -> dict[str, str]:
        """The advertised state after the last admit (empty when not advertised)."""
        out: dict[str, str] = {}
        if not self.advertise:
            return out
        for name, budget in (("requests", self.requests), ("tokens", self.tokens)):
            if budget.rps > 0:
                out[f"x-ratelimit-limit-{name}"] = f"{budget.rps * 60:g}"
                out[f"x-ratelimit-remaining-{name}"] = str(budget.remaining())
                out[f"x-ratelimit-reset-{name}"] = format_duration(budget.reset_s())
        return out


def format_duration(seconds: float) -> str:
    """Seconds in the form OpenAI sends resets ("59.6ms", "1s", "6m0s", "2m59.56s"); what
    loadgen.targets.ratelimit.parse_duration reads back, to within this rounding."""
    s = round(max(0.0, seconds), 2)
    if s < 1.0:
        return f"{round(seconds * 1000, 1):g}ms" if seconds > 0 else "0s"
    minutes, rest = divmod(s, 60.0)
    rest_text = f"{round(rest, 2):g}s"
    return f"{int(minutes)}m{rest_text}" if minutes else rest_text
