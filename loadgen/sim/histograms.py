"""The simulated engine's own latency histograms, exported on /metrics the way vLLM exports
`time_to_first_token_seconds` and `request_queue_time_seconds`: cumulative buckets, a sum and
a count, in seconds measured on the server's monotonic clock.
"""

from __future__ import annotations

import bisect

# vLLM's TTFT buckets (seconds), long enough for a queue that grows past the knee
BUCKETS_S: tuple[float, ...] = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)


class Histogram:
    """Observations in seconds; `lines(name)` renders the exposition (bucket, sum, count)."""

    __slots__ = ("count", "counts", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_S) + 1)  # the last one is +Inf
        self.sum_s = 0.0
        self.count = 0

    def observe_ns(self, ns: int) -> None:
        s = max(0, ns) / 1e9
        self.counts[bisect.bisect_left(BUCKETS_S, s)] += 1
        self.sum_s += s
        self.count += 1

    def lines(self, name: str) -> list[str]:
        out, cum = [], 0
        for le, c in zip((*(f"{b:g}" for b in BUCKETS_S), "+Inf"), self.counts, strict=True):
            cum += c
            out.append(f'{name}_bucket{{le="{le}"}} {cum}')
        out.append(f"{name}_sum {self.sum_s:.6f}")
        out.append(f"{name}_count {self.count}")
        return out
