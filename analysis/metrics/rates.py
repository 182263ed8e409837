"""Windows, throughput and goodput: each level's steady window, tokens and requests inside it, in-
flight load, SLO attainment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis.metrics import audio
from analysis.metrics.base import (
    BoolArray,
    FloatArray,
    IntArray,
)
from analysis.metrics.chunks import (
    ChunkArrays,
    max_itl_ms,
)
from analysis.metrics.latency import (
    e2e_ms,
    e2e_sched_ms,
    output_speed_tps,
    tpot_ms,
    ttfat_ms,
    ttft_ms,
    ttft_sched_ms,
)
from loadgen.results.audio_formulas import AUDIO_SLO_METRICS


def steady_window_s(level: Mapping[str, Any]) -> float:
    """A level's planned steady span: duration_s - warmup_s - cooldown_s (s)."""
    return (
        float(level["duration_s"])
        - float(level.get("warmup_s") or 0.0)
        - float(level.get("cooldown_s") or 0.0)
    )


@dataclass(frozen=True, slots=True)
class Window:
    """A level's steady window on the wall clock: [start_ns, end_ns), ns since the epoch, as the
    runner stored it (run_levels.steady_start/steady_end: for several shards the span in which
    every shard was in its steady phase; for an aborted run cut at the time it stopped)."""

    start_ns: int
    end_ns: int

    @property
    def seconds(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9


@dataclass(frozen=True, slots=True)
class Timeline:
    """Every request's absolute times (int64 ns since the epoch, on the shard's wall anchor):
    `sent_at` = scheduled_at + sent_ns and `end_at` = scheduled_at + end_ns, valid where `sent`;
    `base` is sent_at, the origin of the request's chunk offsets."""

    sent_at: IntArray
    end_at: IntArray
    sent: BoolArray
    ok: BoolArray

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Timeline:
        sched = epoch_ns(df["scheduled_at"])
        sent_ns = df["sent_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
        end_ns = df["end_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
        has = np.isfinite(sent_ns) & np.isfinite(end_ns)
        sent_at = sched + np.where(has, sent_ns, 0.0).astype(np.int64)
        end_at = sched + np.where(has, end_ns, 0.0).astype(np.int64)
        return cls(sent_at, end_at, has, (df["outcome"] == "ok").to_numpy())


def epoch_ns(ts: pd.Series) -> IntArray:
    """UTC timestamps as int64 ns since the epoch."""
    return np.asarray(
        pd.to_datetime(ts, utc=True).dt.tz_localize(None).to_numpy("datetime64[ns]").view(np.int64)
    )


def _stored_ns(x: Any) -> int | None:
    """A stored timestamp as ns since the epoch, None when missing."""
    if x is None or (not isinstance(x, str) and pd.isna(x)):
        return None
    return int(pd.Timestamp(x).value)


def _stored_s(x: Any) -> float | None:
    """A stored duration in seconds, None when missing or not finite."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def level_window(level: Mapping[str, Any], df: pd.DataFrame, rows: npt.NDArray[np.bool_]) -> Window:
    """A level's steady window (wall clock), from its `run_levels` row: steady_start/steady_end
    as the runner stored them; for runs stored before those columns, started_at + warmup to
    started_at + duration - cooldown; without a start, the level's first scheduled request
    (`df` rows where `rows`) stands for it."""
    ss, se = _stored_ns(level.get("steady_start")), _stored_ns(level.get("steady_end"))
    if ss is not None and se is not None:
        return Window(ss, se)
    t0 = _stored_ns(level.get("started_at"))
    if t0 is None:
        if not rows.any():
            return Window(0, 0)
        t0 = int(epoch_ns(df["scheduled_at"])[rows].min())
    dur = _stored_s(level.get("duration_s"))
    if dur is None:
        return Window(0, 0)
    warm = float(level.get("warmup_s") or 0.0)
    cool = float(level.get("cooldown_s") or 0.0)
    return Window(t0 + int(warm * 1e9), t0 + int((dur - cool) * 1e9))


@dataclass(frozen=True, slots=True)
class Arrivals:
    """What a window needs to count tokens by arrival, computed once per frame: per request the
    arrival of its first and last chunk (ns since the epoch; `has` where it was sent and has
    chunks) and its tokens (`total`). A chunk's arrival is sent_at + chunk_offsets_us * 1000.
    Per request only (8 bytes each), never per chunk: a million-request run's chunk arrays are
    not copied."""

    chunks: ChunkArrays
    times: Timeline
    total: IntArray
    first: IntArray
    last: IntArray
    has: BoolArray

    @classmethod
    def of(cls, chunks: ChunkArrays, times: Timeline) -> Arrivals:
        lengths = np.diff(chunks.ptr)
        has = times.sent & (lengths > 0)
        lo = np.minimum(chunks.ptr[:-1], max(chunks.offsets_us.size - 1, 0))
        hi = np.maximum(chunks.ptr[1:] - 1, 0)
        if chunks.offsets_us.size:
            first = times.sent_at + chunks.offsets_us[lo].astype(np.int64) * 1000
            last = times.sent_at + chunks.offsets_us[hi].astype(np.int64) * 1000
        else:
            first = last = np.zeros(chunks.n_requests, dtype=np.int64)
        return cls(chunks, times, chunks.tokens_per_request(), first, last, has)


def tokens_arrived(arr: Arrivals, window: Window, rows: BoolArray | None = None) -> int:
    """Output tokens whose arrival fell inside `window`, over the selected requests (any outcome:
    a failed stream's partial tokens were produced too). A chunk carrying k tokens (after
    fold.finish_tokens has reconciled them with the server's usage) counts all k at its arrival
    (see `Arrivals`). Exact to the µs of the stored offsets: no request is counted whole or left
    out because of when it was scheduled."""
    sel = arr.has if rows is None else arr.has & np.asarray(rows, dtype=bool)
    first, last = arr.first, arr.last
    inside = sel & (first >= window.start_ns) & (last < window.end_ns)
    total = int(arr.total[inside].sum())
    cross = sel & ~inside & (last >= window.start_ns) & (first < window.end_ns)
    ptr, offsets, tokens = arr.chunks.ptr, arr.chunks.offsets_us, arr.chunks.tokens
    base = arr.times.sent_at
    for j in np.flatnonzero(cross):  # a few per level: the requests the window's edges cut
        lo, hi = int(ptr[j]), int(ptr[j + 1])
        at = offsets[lo:hi].astype(np.int64) * 1000 + base[j]
        a = int(np.searchsorted(at, window.start_ns, side="left"))
        b = int(np.searchsorted(at, window.end_ns, side="left"))
        total += int(tokens[lo + a : lo + b].sum(dtype=np.int64))
    return total


def output_token_rate(arr: Arrivals, window: Window, rows: BoolArray | None = None) -> float:
    """Output throughput (tokens/s): `tokens_arrived(arr, window, rows)` / window.seconds.
    Pooled: the selected requests of every shard and region count in the one window. NaN for
    an empty window, and when no selected ok request has chunk stamps (a run imported from a
    tool that kept no arrival times: its tokens' arrivals are unknown, not zero)."""
    s = window.seconds
    sel = arr.times.ok & arr.times.sent
    if rows is not None:
        sel = sel & np.asarray(rows, dtype=bool)
    if sel.any() and not (sel & arr.has).any():
        return float("nan")
    return tokens_arrived(arr, window, rows) / s if s > 0 else float("nan")


def completed_in(times: Timeline, window: Window, rows: BoolArray | None = None) -> BoolArray:
    """Requests that ended ok inside `window` (end_at in [start, end))."""
    end = times.end_at
    done = times.ok & times.sent & (end >= window.start_ns) & (end < window.end_ns)
    return done & np.asarray(rows, dtype=bool) if rows is not None else done


def request_rate(times: Timeline, window: Window, rows: BoolArray | None = None) -> float:
    """Request throughput (req/s): ok requests that *completed* inside the window (end_at in
    [start, end)), whenever they were scheduled, / window.seconds."""
    s = window.seconds
    return int(completed_in(times, window, rows).sum()) / s if s > 0 else float("nan")


def in_flight_mean(times: Timeline, window: Window, rows: BoolArray | None = None) -> float:
    """Time-weighted mean of requests in flight over the window: each selected request's
    [sent_at, end_at] overlap with the window, summed, / window length."""
    s = window.seconds
    if not s > 0:
        return float("nan")
    sel = times.sent if rows is None else times.sent & np.asarray(rows, dtype=bool)
    a = np.maximum(times.sent_at[sel], window.start_ns)
    b = np.minimum(times.end_at[sel], window.end_ns)
    return float(np.clip(b - a, 0, None).sum()) / 1e9 / s


def in_flight_max(times: Timeline, window: Window, rows: BoolArray | None = None) -> int:
    """The largest number of selected requests in flight at once inside the window."""
    sel = times.sent if rows is None else times.sent & np.asarray(rows, dtype=bool)
    s, e = times.sent_at[sel], times.end_at[sel]
    keep = (e > window.start_ns) & (s < window.end_ns)
    s, e = s[keep], e[keep]
    if s.size == 0:
        return 0
    at_start = int(((s <= window.start_ns) & (e > window.start_ns)).sum())
    later = s[s > window.start_ns]
    ends = e[(e > window.start_ns) & (e < window.end_ns)]
    t = np.concatenate((ends, later))
    d = np.concatenate((np.full(ends.size, -1), np.ones(later.size, dtype=np.int64)))
    order = np.lexsort((d, t))  # at one instant, an end before a start
    run = at_start + np.cumsum(d[order])
    return max(at_start, int(run.max()) if run.size else at_start)


SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms", *AUDIO_SLO_METRICS)


def per_request_values(
    df: pd.DataFrame, metric: str, chunks: ChunkArrays | None = None
) -> FloatArray:
    """One value per request for a per-request metric name (`ttft_ms` from send, `ttft_sched_ms`,
    `ttfat_ms`, `tpot_ms`, `e2e_ms`, `e2e_sched_ms`, `output_speed_tps`; `itl_ms` = the request's
    max per-token ITL)."""
    fns = {
        "ttft_ms": ttft_ms,
        "ttft_sched_ms": ttft_sched_ms,
        "ttfat_ms": ttfat_ms,
        "tpot_ms": tpot_ms,
        "e2e_ms": e2e_ms,
        "e2e_sched_ms": e2e_sched_ms,
        "output_speed_tps": output_speed_tps,
        "ttfab_ms": audio.ttfab_ms,  # speech (analysis.metrics.audio)
        "audio_rtf": audio.audio_rtf,
        "audio_speed_x": audio.audio_speed_x,
        "words_per_s": audio.words_per_s,
    }
    if metric == "itl_ms":
        return max_itl_ms(chunks if chunks is not None else ChunkArrays.from_frame(df))
    if metric not in fns:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join([*fns, 'itl_ms'])}")
    return fns[metric](df)


def meets_slos(
    df: pd.DataFrame, slos: Sequence[Mapping[str, Any]], chunks: ChunkArrays | None = None
) -> BoolArray:
    """Per request: ok, and for every SLO `{metric, threshold}` its value <= threshold (ms).
    A request's `itl_ms` is its max per-token ITL; a missing value (e.g. TPOT of a one-token
    answer) does not fail that SLO. `percentile` of an SLO applies to the run, not a request."""
    good = (df["outcome"] == "ok").to_numpy().copy()
    for slo in slos:
        v = per_request_values(df, str(slo["metric"]), chunks)
        good &= ~(v > float(slo["threshold"]))
    return np.asarray(good, dtype=bool)


def goodput(
    df: pd.DataFrame,
    slos: Sequence[Mapping[str, Any]],
    times: Timeline,
    window: Window,
    rows: BoolArray | None = None,
    chunks: ChunkArrays | None = None,
) -> float:
    """Goodput (req/s): requests that completed inside the window (see `request_rate`) and met
    every SLO (see `meets_slos`) / window.seconds. With no SLOs it equals `request_rate`."""
    s = window.seconds
    good = meets_slos(df, slos, chunks) & completed_in(times, window, rows)
    return int(good.sum()) / s if s > 0 else float("nan")
