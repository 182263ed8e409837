"""The load shortfall judged by the exit verdict (analysis/verdicts/verdict.py) and the saturation
search (loadgen/engine/search.py) alike: what a level delivered against what its own schedule asked
for, so a random schedule's own sampling is never taken for the generator's or the server's
shortfall.

For an open-loop (rate) level the schedule is seeded and pure (loadgen/engine/schedule.py), and
every arrival it held in the steady window is a stored request (a `not_sent` one included): asked =
those requests, delivered = those of them sent inside the window; shortfall = 1 - delivered /
asked. (Against the mean rate instead, a Poisson level of r req/s over s seconds would be "short"
by chance: its count has a standard deviation of sqrt(r s), 10 % of 108 at 6 req/s for 18 s.)
For a closed-loop (concurrency) level: 1 - the mean in flight / the configured concurrency.
A level short by more than `[validity] max_load_shortfall` did not deliver the load it claims to
measure: a claim on it is undecidable unless it fails anyway.
"""

from __future__ import annotations

import math


def rate_shortfall(asked: int, delivered: int) -> float | None:
    """1 - delivered / asked for an open-loop level (None when it asked for nothing)."""
    return None if asked <= 0 else 1.0 - delivered / asked


def concurrency_shortfall(configured: float, mean_in_flight: float | None) -> float | None:
    """1 - mean in flight / configured for a closed-loop level (None when unknown)."""
    if not configured or mean_in_flight is None or not math.isfinite(mean_in_flight):
        return None
    return 1.0 - mean_in_flight / configured


def is_short(shortfall: float | None, bound: float) -> bool:
    """Whether a level fell short by more than `bound` (`max_load_shortfall`)."""
    return shortfall is not None and shortfall > bound
