"""Checks across a spec's fields that pydantic's per-field bounds cannot express: a saturation
search's start above its maximum, a request deadline too short for any answer to arrive."""

from __future__ import annotations

# Below this no request can be answered: a loopback connect plus one response read takes more
# than a millisecond on a loaded host, so every request would fail on its deadline and the run
# would report a cause (no connection, timed out) that is the spec's, not the server's.
MIN_DEADLINE_S = 0.01


def search_bounds_error(start: float, maximum: float) -> str | None:
    """Why a saturation search from `start` up to `maximum` is not a search, or None."""
    if start > maximum:
        return (
            f"start ({start:g}) is above max ({maximum:g}): the search would run levels "
            "above its maximum. Give start <= max"
        )
    return None


def deadline_error(deadline_s: float) -> str | None:
    """Why `deadline_s` (a whole request's bound) cannot be met by any request, or None."""
    if deadline_s < MIN_DEADLINE_S:
        return (
            f"{deadline_s:g} s is below the floor of {MIN_DEADLINE_S * 1000:g} ms: no request "
            "can be answered that fast, so every one would fail on the deadline"
        )
    return None
