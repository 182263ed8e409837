"""Every metric peakload reports, one definition each, formula in the docstring. Vectorised over a
requests DataFrame (see analysis.store.load.load_requests) and flat chunk arrays (`ChunkArrays`).

Per-request formulas (TTFT, TPOT, E2E, ITL per token, …) are loadgen.formulas' (with their SQL
forms, so the store and the runner compute the same numbers); this module applies them to
frames and chunk arrays and defines the rest (throughput, goodput, connections, server times).

Clocks: `*_ns` columns are ns on the measuring host's monotonic clock from the request's
*scheduled* time; chunk offsets are µs from *send*. Latencies are returned in ms (float64), NaN
where a request has no value. Percentiles are exact, from raw rows, numpy `method="linear"`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from loadgen import formulas

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

PERCENTILE_METHOD: Final = "linear"  # numpy's default (type 7 of Hyndman & Fan)
_NS_PER_MS = 1e6


def _col(df: pd.DataFrame, name: str) -> FloatArray:
    return np.asarray(df[name].to_numpy(dtype=np.float64, na_value=np.nan))


def percentile(values: npt.ArrayLike, q: float | Sequence[float]) -> Any:
    """Exact percentile(s) `q` (0..100) of the finite `values`, numpy `method="linear"`.
    NaN when there are no finite values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.full(np.shape(q), np.nan) if np.ndim(q) else float("nan")
    return np.percentile(v, np.asarray(q, dtype=np.float64), method=PERCENTILE_METHOD)


# ---------------------------------------------------------------- per-request latencies (ms)


def of_frame(df: pd.DataFrame, metric: formulas.RequestMetric) -> FloatArray:
    """A per-request metric (loadgen.formulas) of every row of `df`, from its stored columns."""
    return metric.python(*(_col(df, c) for c in metric.columns))


def ttft_ms(df: pd.DataFrame) -> FloatArray:
    """TTFT from send (the TTFT the summary reports): loadgen.formulas.ttft_ms."""
    return of_frame(df, formulas.TTFT)


def ttft_sched_ms(df: pd.DataFrame) -> FloatArray:
    """TTFT from the scheduled time (shows coordinated omission): loadgen.formulas.ttft_sched_ms."""
    return of_frame(df, formulas.TTFT_SCHED)


def ttfat_ms(df: pd.DataFrame) -> FloatArray:
    """Time to first answer token from send: loadgen.formulas.ttfat_ms."""
    return of_frame(df, formulas.TTFAT)


def tpot_ms(df: pd.DataFrame) -> FloatArray:
    """Time per output token after the first (NaN for one-token answers):
    loadgen.formulas.tpot_ms."""
    return of_frame(df, formulas.TPOT)


def e2e_ms(df: pd.DataFrame) -> FloatArray:
    """End-to-end latency from send (the E2E reported): loadgen.formulas.e2e_ms."""
    return of_frame(df, formulas.E2E)


def e2e_sched_ms(df: pd.DataFrame) -> FloatArray:
    """End-to-end latency from the scheduled time: loadgen.formulas.e2e_sched_ms."""
    return of_frame(df, formulas.E2E_SCHED)


def output_speed_tps(df: pd.DataFrame) -> FloatArray:
    """Per-request output speed, tokens/s after the first token (1000 / TPOT_ms):
    loadgen.formulas.output_speed_tps."""
    return of_frame(df, formulas.OUTPUT_SPEED)


# ---------------------------------------------------------------- chunks and inter-token latency


@dataclass(frozen=True, slots=True)
class ChunkArrays:
    """Every request's chunks concatenated: request i owns `offsets_us[ptr[i]:ptr[i+1]]` (µs from
    send) and `tokens[ptr[i]:ptr[i+1]]` (tokens attributed to each chunk)."""

    offsets_us: npt.NDArray[np.integer[Any]]  # int64, or int32 from analysis.store.fastload
    tokens: npt.NDArray[np.integer[Any]]  # int64, or int16 from analysis.store.fastload
    ptr: IntArray

    @property
    def n_requests(self) -> int:
        return int(self.ptr.size - 1)

    @classmethod
    def from_lists(cls, offsets: Iterable[Any], tokens: Iterable[Any]) -> ChunkArrays:
        offs = [np.asarray(a, dtype=np.int64) for a in offsets]
        toks = [np.asarray(a, dtype=np.int64) for a in tokens]
        if len(offs) != len(toks):
            raise ValueError("offsets and tokens have different numbers of requests")
        lengths = np.fromiter((a.size for a in offs), dtype=np.int64, count=len(offs))
        if any(a.size != b.size for a, b in zip(offs, toks, strict=True)):
            raise ValueError("a request's chunk_offsets_us and chunk_tokens differ in length")
        ptr = np.zeros(len(offs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        empty = np.zeros(0, dtype=np.int64)
        return cls(
            offsets_us=np.concatenate(offs) if offs else empty,
            tokens=np.concatenate(toks) if toks else empty,
            ptr=ptr,
        )

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> ChunkArrays:
        return cls.from_lists(df["chunk_offsets_us"], df["chunk_tokens"])


@dataclass(frozen=True, slots=True)
class Gaps:
    """Inter-chunk gaps of the selected requests: gap j (µs) arrived at a chunk carrying
    `tokens[j]` tokens; `label[j]` is the owning request's label (its row index by default)."""

    gap_us: npt.NDArray[np.integer[Any]]
    tokens: npt.NDArray[np.integer[Any]]
    label: npt.NDArray[np.integer[Any]]


def chunk_gaps(
    chunks: ChunkArrays,
    rows: BoolArray | None = None,
    *,
    labels: npt.NDArray[np.integer[Any]] | None = None,
) -> Gaps:
    """Gaps between consecutive chunks carrying tokens (> 0), from the first such chunk, within
    each selected request: loadgen.formulas.token_gaps of every selected request at once.
    Chunks with no tokens (role-only, usage-only) are skipped. `labels`
    (one int per request; default the row index) is carried to each gap.

    When every chunk carries tokens, no per-chunk row index is built (memory: one bool per
    chunk); otherwise an int32 row index per chunk is."""
    lengths = np.diff(chunks.ptr)
    n_total = chunks.offsets_us.size
    lab_src = labels if labels is not None else np.arange(chunks.n_requests, dtype=np.int64)
    if n_total and bool((chunks.tokens > 0).all()):
        valid = np.ones(max(n_total - 1, 0), dtype=bool)
        bounds = chunks.ptr[1:-1]
        valid[bounds[(bounds > 0) & (bounds < n_total)] - 1] = False  # across two requests
        if rows is not None:
            valid &= np.repeat(np.asarray(rows, dtype=bool), lengths)[1:]
        gaps = np.diff(chunks.offsets_us)[valid]
        return Gaps(
            gap_us=gaps,
            tokens=chunks.tokens[1:][valid],
            label=np.repeat(lab_src, lengths)[1:][valid],
        )
    owner = np.repeat(np.arange(chunks.n_requests, dtype=np.int32), lengths)
    keep = chunks.tokens > 0
    if rows is not None:
        keep &= np.asarray(rows, dtype=bool)[owner]
    r = owner[keep]
    off = chunks.offsets_us[keep]
    tok = chunks.tokens[keep]
    same = r[1:] == r[:-1]
    return Gaps(gap_us=(off[1:] - off[:-1])[same], tokens=tok[1:][same], label=lab_src[r[1:][same]])


def per_token_values(g: Gaps) -> tuple[FloatArray, npt.NDArray[np.integer[Any]]]:
    """Per-token ITL samples (ms) and their labels: a gap g before a chunk of k tokens gives k
    samples of g/k."""
    per = formulas.per_token_gap_ms(g.gap_us, g.tokens)
    if bool((g.tokens == 1).all()):
        return per, g.label
    return np.repeat(per, g.tokens), np.repeat(g.label, g.tokens)


def itl_per_chunk_ms(chunks: ChunkArrays, rows: BoolArray | None = None) -> FloatArray:
    """ITL per chunk: each gap between consecutive token-carrying chunks counts once,
    (offset[j] - offset[j-1]) / 1e3 ms, from the first token-carrying chunk on."""
    return chunk_gaps(chunks, rows).gap_us.astype(np.float64) / 1e3


def itl_per_token_ms(chunks: ChunkArrays, rows: BoolArray | None = None) -> FloatArray:
    """ITL per token (the ITL reported): loadgen.formulas.itl_per_token_ms of the selected
    requests, concatenated (a chunk of k tokens g after the previous token-carrying chunk gives
    k samples of g/k; the first chunk's extra tokens none)."""
    return per_token_values(chunk_gaps(chunks, rows))[0]


def max_itl_ms(chunks: ChunkArrays, rows: BoolArray | None = None) -> FloatArray:
    """Per request, the largest per-token ITL (ms): max over its chunks of g/k; NaN for
    requests with fewer than two token-carrying chunks. Used by goodput's `itl_ms` SLO."""
    g = chunk_gaps(chunks, rows)
    out = np.full(chunks.n_requests, np.nan)
    if g.label.size:
        per = formulas.per_token_gap_ms(g.gap_us, g.tokens)
        starts = np.flatnonzero(np.r_[True, g.label[1:] != g.label[:-1]])
        out[g.label[starts]] = np.maximum.reduceat(per, starts)
    return out


# ---------------------------------------------------------------- windows, throughput, goodput


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
        total = np.zeros(chunks.n_requests, dtype=np.int64)
        nonempty = np.flatnonzero(lengths > 0)
        if nonempty.size:
            sums = np.add.reduceat(chunks.tokens, chunks.ptr[:-1][nonempty], dtype=np.int64)
            total[nonempty] = sums
        return cls(chunks, times, total, first, last, has)


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
    an empty window."""
    s = window.seconds
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


SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms")


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


# ---------------------------------------------------------------- failures and token counts


def failure_kind(df: pd.DataFrame) -> pd.Series:
    """A failure's kind: `http_<status>` for HTTP errors, `timeout:<phase>`, `not_sent:<reason>`,
    `stream_error:schema` for answers that broke the requested structured output, else the
    outcome (`stream_error`, `cancelled`); `ok` for successes."""
    outcome = df["outcome"].astype(object).to_numpy()
    kind = outcome.copy()
    http = np.flatnonzero(outcome == "http_error")
    if http.size:
        status = df["http_status"].to_numpy(dtype=np.float64, na_value=np.nan)[http]
        kind[http] = [f"http_{int(x)}" if np.isfinite(x) else "http_unknown" for x in status]
    phase = df["error_phase"].astype(object).to_numpy()
    schema = (outcome == "stream_error") & (phase == "schema")
    timed = np.flatnonzero(
        ((outcome == "timeout") | (outcome == "not_sent") | schema) & pd.notna(phase)
    )
    if timed.size:
        kind[timed] = [
            f"{o}:{p}" if p else o for o, p in zip(outcome[timed], phase[timed], strict=True)
        ]
    return pd.Series(kind, index=df.index, dtype=object)


def error_rates(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per failure kind: count and rate = count / all requests in `df`."""
    n = len(df)
    kinds = failure_kind(df)
    counts = kinds[kinds != "ok"].value_counts().sort_index()
    return {str(k): {"count": int(c), "rate": c / n} for k, c in counts.items()}


def token_agreement(df: pd.DataFrame) -> dict[str, float | int | None]:
    """Server usage vs client count, over requests with `usage_completion_tokens`: n, fraction
    exactly equal, mean and max |usage - client_tokens| and the mean relative difference
    (usage - client) / usage."""
    has = df["usage_completion_tokens"].notna()
    n = int(has.sum())
    if n == 0:
        return {
            "n": 0,
            "exact_fraction": None,
            "mean_abs_diff": None,
            "max_abs_diff": None,
            "mean_rel_diff": None,
        }
    usage = df.loc[has, "usage_completion_tokens"].to_numpy(dtype=np.float64)
    client = df.loc[has, "client_tokens"].to_numpy(dtype=np.float64)
    diff = usage - client
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(usage > 0, diff / usage, np.nan)
    return {
        "n": n,
        "exact_fraction": float(np.mean(diff == 0)),
        "mean_abs_diff": float(np.mean(np.abs(diff))),
        "max_abs_diff": float(np.max(np.abs(diff))),
        "mean_rel_diff": float(np.nanmean(rel)) if np.isfinite(rel).any() else None,
    }


# ---------------------------------------------------------------- connections, server timings
# (columns of deploy/sql/0120: NULL, so NaN here, on rows stored before it; a frame without
# them has nothing on record)


def _opt(df: pd.DataFrame, name: str) -> FloatArray:
    return _col(df, name) if name in df.columns else np.full(len(df), np.nan)


def connect_ms(df: pd.DataFrame) -> FloatArray:
    """Connection set-up inside a request: connect_ns / 1e6 (TCP and TLS, ms on the measuring
    host's monotonic clock); NaN where an idle kept-alive connection was reused."""
    return _opt(df, "connect_ns") / _NS_PER_MS


def connection_recorded(df: pd.DataFrame) -> BoolArray:
    """Requests whose connection is on record: sent (sent_ns set) and `resent` not NULL (rows
    stored before deploy/sql/0120 say nothing of their connection: NaN there)."""
    return np.asarray(np.isfinite(_col(df, "sent_ns")) & np.isfinite(_opt(df, "resent")))


def new_connection_share(df: pd.DataFrame) -> float | None:
    """Share of the requests that opened a new connection: requests with connect_ns set /
    requests whose connection is on record (`connection_recorded`); None when none is."""
    rec = connection_recorded(df)
    n = int(rec.sum())
    return int(np.isfinite(_opt(df, "connect_ns")[rec]).sum()) / n if n else None


def resent_total(df: pd.DataFrame) -> int | None:
    """Re-sends: sum of `resent` over the requests (a request sent again, once, on a new
    connection after its reused one died before any response byte); None when none has it on
    record."""
    v = _opt(df, "resent")
    v = v[np.isfinite(v)]
    return int(v.sum()) if v.size else None


def server_prefill_ms(df: pd.DataFrame) -> FloatArray:
    """The server's own time to first token: server_prefill_ms + server_queue_ms (the queue
    counted as 0 where the server reports none), ms on the server's clock; NaN where it
    reports no prefill time."""
    queue = np.nan_to_num(_opt(df, "server_queue_ms"), nan=0.0)
    return _opt(df, "server_prefill_ms") + queue


def server_itl_ms(df: pd.DataFrame) -> FloatArray:
    """The server's own time between tokens: server_decode_ms / (server_decode_tokens - 1)
    (ms), for server_decode_tokens > 1, else NaN. decode_ms runs from the first generated
    token to the last (loadgen.target.ServerTimings), i.e. over decode_tokens - 1 gaps: the
    convention of the client's ITL and TPOT. (llama.cpp's own predicted_per_token_ms, and
    ServerTimings.ms_per_token, divide by all decode_tokens: lower by a factor (n - 1) / n,
    8 % at 12 tokens, which a comparison with the client would count as network time.)"""
    n = _opt(df, "server_decode_tokens")
    with np.errstate(divide="ignore", invalid="ignore"):
        v = _opt(df, "server_decode_ms") / (n - 1.0)
    return np.where(n > 1, v, np.nan)


def client_vs_server(
    ttft: FloatArray,
    prefill: FloatArray,
    itl: tuple[float, int],
    per_token: FloatArray,
) -> dict[str, float | int | None] | None:
    """The client's latencies set against the server's own account, for one set of requests:
    `ttft` (`ttft_ms`) and `prefill` (`server_prefill_ms`) per request; `itl` = (p50, samples)
    of the client's per-token ITL (`itl_per_token_ms`) over the requests with a finite
    `per_token` (`server_itl_ms`).

    - client_ttft_p50_ms, server_prefill_p50_ms: p50 of each over the requests having both
      (n: ttft_n); ttft_gap_ms = client p50 - server p50: network, the client, and any queue
      the server does not report.
    - client_itl_p50_ms, server_itl_p50_ms (p50 over requests; n: itl_n requests,
      client_itl_samples tokens); itl_gap_ms = client p50 - server p50.
    Differences are of the two p50s, not p50s of per-request differences. None when no request
    has a server time."""
    both = np.isfinite(ttft) & np.isfinite(prefill)
    per = per_token[np.isfinite(per_token)]
    if not both.any() and per.size == 0:
        return None
    c_ttft = float(percentile(ttft[both], 50.0))
    s_ttft = float(percentile(prefill[both], 50.0))
    c_itl = float(itl[0]) if itl[1] else float("nan")
    s_itl = float(percentile(per, 50.0))

    def num(x: float) -> float | None:
        return x if np.isfinite(x) else None

    return {
        "ttft_n": int(both.sum()),
        "client_ttft_p50_ms": num(c_ttft),
        "server_prefill_p50_ms": num(s_ttft),
        "ttft_gap_ms": num(c_ttft - s_ttft),
        "itl_n": int(per.size),
        "client_itl_samples": int(itl[1]),
        "client_itl_p50_ms": num(c_itl),
        "server_itl_p50_ms": num(s_itl),
        "itl_gap_ms": num(c_itl - s_itl),
    }
