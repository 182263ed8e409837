"""Clock offset of this host to the reference clock (the broker's Redis `TIME`): several probes,
keep the one with the smallest round trip; offset ± half that round trip. Converts the
coordinator's absolute start time (reference ns) into this host's monotonic clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import redis

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_PROBES = 16
REDIS_TIME_RESOLUTION_NS = 1_000  # TIME answers in whole microseconds
MAX_UNCERTAINTY_NS = 5_000_000  # a worker less sure than ±5 ms of its offset is marked suspect
REDIS_OUTAGE_S = 30.0  # RELIABILITY C3: workers recover from a Redis restart within 30 s


class TimeSource(Protocol):
    """Anything answering Redis `TIME`: (seconds, microseconds) on the reference clock."""

    def time(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    """`offset_mono_ns` = reference - this host's monotonic clock (perf_counter_ns);
    `offset_wall_ns` = reference - this host's wall clock (time.time_ns), both at the best
    probe; `uncertainty_ns` = half its round trip plus the reference's resolution."""

    offset_mono_ns: int
    offset_wall_ns: int
    uncertainty_ns: int
    rtt_ns: int
    probes: int

    @property
    def suspect(self) -> bool:
        return self.uncertainty_ns > MAX_UNCERTAINTY_NS

    def ref_to_mono(self, ref_ns: int) -> int:
        """A reference-clock instant (ns since the epoch) as this host's perf_counter_ns."""
        return ref_ns - self.offset_mono_ns

    def mono_to_ref(self, mono_ns: int) -> int:
        return mono_ns + self.offset_mono_ns


def _ref_ns(answer: Any) -> int:
    sec, usec = answer
    return int(sec) * 1_000_000_000 + int(usec) * 1_000


def reference_now_ns(source: TimeSource) -> int:
    """The reference clock now, ns since the epoch (one round trip stale at most)."""
    return _ref_ns(source.time())


def measure_offset(source: TimeSource, probes: int = DEFAULT_PROBES) -> ClockEstimate:
    """Probe the reference `probes` times; the probe with the smallest round trip wins, since
    its reading is the one whose moment is known most tightly (midpoint of send and receive)."""
    if probes < 1:
        raise ValueError(f"probes must be at least 1 (got {probes})")
    best: tuple[int, int, int] | None = None  # (rtt, ref, mono_mid)
    for _ in range(probes):
        t0 = time.perf_counter_ns()
        ref = _ref_ns(source.time())
        t1 = time.perf_counter_ns()
        rtt = t1 - t0
        if best is None or rtt < best[0]:
            best = (rtt, ref, t0 + rtt // 2)
    assert best is not None
    rtt, ref, mid = best
    # one wall/monotonic anchor pair, read back to back, maps the midpoint onto the wall clock
    wall_now, mono_now = time.time_ns(), time.perf_counter_ns()
    wall_mid = wall_now - (mono_now - mid)
    return ClockEstimate(
        offset_mono_ns=ref - mid,
        offset_wall_ns=ref - wall_mid,
        uncertainty_ns=rtt // 2 + REDIS_TIME_RESOLUTION_NS,
        rtt_ns=rtt,
        probes=probes,
    )


def redis_clock(
    url: str, *, ride_through_s: float = REDIS_OUTAGE_S, probes: int = DEFAULT_PROBES
) -> ClockEstimate:
    """measure_offset against the Redis at `url`, riding through an outage (with_redis). A
    shard measures its clock while the fleet starts, so a Redis restart then is the start's
    moment, not a reason to fail."""
    return with_redis(url, lambda r: measure_offset(r, probes), ride_through_s)


def redis_now_ns(url: str, *, ride_through_s: float = REDIS_OUTAGE_S) -> int:
    """reference_now_ns from the Redis at `url`, riding through an outage (with_redis)."""
    return with_redis(url, reference_now_ns, ride_through_s)


def with_redis(url: str, use: Callable[[redis.Redis], T], ride_through_s: float) -> T:
    """`use(a connection to url)`, riding through a Redis outage (RELIABILITY C3): a refused,
    dropped or timed-out connection is tried again, with backoff, for up to `ride_through_s`;
    after that its error is raised."""
    end = time.monotonic() + ride_through_s
    delay = 0.1
    while True:
        try:
            with redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5) as r:
                return use(r)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if time.monotonic() + delay > end:
                raise
            log.warning("reference clock (Redis) unreachable (%s); retrying", exc)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
