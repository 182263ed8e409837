"""The store writer's counters and its ingest lag window (monotonic clock, from `write()` to the
commit that made the record's row visible)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, replace
from typing import Any

LAG_WINDOW = 4096  # recent (lag, records) samples kept for p50/max


@dataclass(slots=True)
class WriterStats:
    """Counts since the writer started. `rows_duplicate` are records whose row already existed
    (a replay after an unknown outcome); `records_lost` could be neither committed nor spooled.
    Lags are seconds."""

    records_received: int = 0
    ticks_received: int = 0
    rows_inserted: int = 0
    rows_duplicate: int = 0
    ticks_inserted: int = 0
    batches_committed: int = 0
    spooled_batches: int = 0
    replayed_batches: int = 0
    rejected_batches: int = 0
    direct_fallbacks: int = 0  # first attempts that met existing rows and went through staging
    spool_pending: int = 0
    connect_failures: int = 0
    records_lost: int = 0
    lag_p50_s: float | None = None
    lag_max_s: float | None = None
    last_error: str | None = None

    def snapshot(self, lags: LagWindow, spool_pending: int) -> WriterStats:
        p50, mx = lags.p50_max_s()
        return replace(self, spool_pending=spool_pending, lag_p50_s=p50, lag_max_s=mx)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def counts(self) -> dict[str, int]:
        """The counts alone, without lags or an error's text: what a shard keeps of its writer
        (batches spooled while the store was unreachable, and replayed)."""
        return {k: v for k, v in self.to_json().items() if type(v) is int}


class LagWindow:
    """Record-weighted lag samples of recent commits, and the maximum since the start."""

    def __init__(self, size: int = LAG_WINDOW) -> None:
        self._samples: collections.deque[tuple[int, int]] = collections.deque(maxlen=size)
        self._max_ns = 0

    def add(self, lag_ns: int, records: int) -> None:
        if records > 0:
            self._samples.append((lag_ns, records))
            self._max_ns = max(self._max_ns, lag_ns)

    def add_batch(self, times: list[tuple[int, int]], commit_ns: int) -> None:
        """`times` are (write() time ns, records) pairs committed at `commit_ns`."""
        for t_ns, n in times:
            self.add(commit_ns - t_ns, n)

    def p50_max_s(self) -> tuple[float | None, float | None]:
        samples = sorted(self._samples)
        total = sum(n for _, n in samples)
        if total == 0:
            return None, None
        half, seen = total / 2, 0
        for lag, n in samples:
            seen += n
            if seen >= half:
                return lag / 1e9, self._max_ns / 1e9
        return samples[-1][0] / 1e9, self._max_ns / 1e9
