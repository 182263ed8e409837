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


def choose_faults(cfg: SimConfig, request_id: str, header: str | None) -> Faults:
    """The header's faults if present (rates are then not drawn), else at most one drawn fault."""
    if header is not None:
        return parse_fault_header(header)
    if not cfg.faults:
        return {}
    u = unit_hash(cfg.seed, request_id, "fault")
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
    """A token bucket of `rps` requests per second holding at most `burst` (monotonic clock)."""

    def __init__(self, rps: float, burst: float, now_ns: int | None = None) -> None:
        self.rps = rps
        self.burst = burst if burst > 0 else max(rps, 1.0)
        self._tokens = self.burst
        self._last_ns = time.perf_counter_ns() if now_ns is None else now_ns

    def take(self, now_ns: int) -> float | None:
        """None if the request fits; otherwise the seconds until it would (for Retry-After)."""
        if self.rps <= 0:
            return None
        elapsed_ns = max(0, now_ns - self._last_ns)
        self._tokens = min(self.burst, self._tokens + elapsed_ns / 1e9 * self.rps)
        self._last_ns = max(now_ns, self._last_ns)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return None
        return (1.0 - self._tokens) / self.rps
