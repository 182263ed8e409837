"""The server's TTFT split into queue time + prefill, per level and per time bucket: from the
requests' own server timings where they report the part (`level_request_timings`,
`bucket_request_timings`), else from the scraped TTFT and queue-time histograms, with where each
figure came from (FROM_REQUESTS, FROM_HISTOGRAMS). The series themselves: server_metrics.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis import metrics as m

# the epoch: analysis.store.buckets.timeseries buckets from here
_ORIGIN = pd.Timestamp("1970-01-01", tz="UTC")


def bucket_of(t: pd.Series, bucket_s: float) -> pd.Series:
    """The start (UTC) of the `bucket_s`-second bucket holding each time, buckets counted from
    the epoch as analysis.store.buckets.timeseries counts them."""
    w = pd.Timedelta(seconds=bucket_s)
    return _ORIGIN + ((t - _ORIGIN) // w) * w


def _mean(values: np.ndarray) -> float | None:
    v = values[np.isfinite(values)]
    return float(v.mean()) if v.size else None


def _timings_of(sub: pd.DataFrame) -> dict[str, Any] | None:
    """The server's own account over `sub`'s requests: how many reported a prefill time (`n`)
    and a queue time (`queue_n`), and the means (ms) of the queue time, the prefill time and
    their sum, the server's TTFT (analysis.metrics.server_prefill_ms, over the requests that
    reported both); None when none reported either."""
    prefill, queue = _prefill_queue(sub)
    return _timings(prefill, queue, m.server_prefill_ms(sub))


def _prefill_queue(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    prefill = df["server_prefill_ms"].to_numpy(dtype="float64")
    queue = (
        df["server_queue_ms"].to_numpy(dtype="float64")
        if "server_queue_ms" in df
        else np.full(len(df), np.nan)
    )
    return prefill, queue


def _timings(prefill: np.ndarray, queue: np.ndarray, ttft: np.ndarray) -> dict[str, Any] | None:
    """_timings_of over aligned per-request arrays (`ttft`: analysis.metrics.server_prefill_ms)."""
    both = np.isfinite(prefill) & np.isfinite(queue)
    n = int(np.isfinite(prefill).sum())
    if not n and not np.isfinite(queue).any():
        return None
    return {
        "n": n,
        "queue_n": int(np.isfinite(queue).sum()),
        "queue_ms": _mean(queue),
        "prefill_ms": _mean(prefill),
        "ttft_ms": _mean(ttft[both]) if both.any() else None,
    }


def level_request_timings(df: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """Per level, the server's own per-request account (_timings_of) of its steady-phase ok
    requests that carry one: llama.cpp `timings`, Groq/Cerebras times, TGI headers, Ollama
    durations. Levels without any: absent."""
    out: dict[int, dict[str, Any]] = {}
    if df.empty or "server_prefill_ms" not in df:
        return out
    # on the columns' arrays, masked per level: no copy of the frame per level
    keep = np.asarray((df["outcome"] == "ok") & (df["phase"] == "steady"), dtype=bool)
    prefill, queue = _prefill_queue(df)
    ttft = m.server_prefill_ms(df)
    level = df["level"].to_numpy()
    for lv in np.unique(level[keep]):
        rows = keep & (level == lv)
        timed = _timings(prefill[rows], queue[rows], ttft[rows])
        if timed is not None:
            out[int(lv)] = timed
    return out


def bucket_request_timings(df: pd.DataFrame, bucket_s: float) -> dict[pd.Timestamp, dict[str, Any]]:
    """Per time bucket, the server's own per-request account (_timings_of) of the ok requests
    (any phase) whose first token arrived in it (wall clock: scheduled_at + first_token_ns,
    the axis of client_ttft_series: the server's queue and prefill end at that token)."""
    out: dict[pd.Timestamp, dict[str, Any]] = {}
    if df.empty or "server_prefill_ms" not in df:
        return out
    prefill, queue = _prefill_queue(df)
    # a request that reported neither part adds nothing to its bucket's account: left out, a
    # run whose server reports no timings costs one pass, not one group per bucket
    keep = np.asarray(df["outcome"] == "ok", dtype=bool) & df["first_token_ns"].notna().to_numpy()
    keep &= np.isfinite(prefill) | np.isfinite(queue)
    if not keep.any():
        return out
    ok = df[keep]
    arrived = ok["scheduled_at"] + pd.to_timedelta(ok["first_token_ns"].astype("float64"), "ns")
    codes, buckets = pd.factorize(bucket_of(arrived, bucket_s), sort=True)
    prefill, queue, ttft = prefill[keep], queue[keep], m.server_prefill_ms(ok)
    order = np.argsort(codes, kind="stable")  # each bucket's requests in frame order
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    for b, idx in zip(buckets, np.split(order, starts[1:]), strict=True):
        timed = _timings(prefill[idx], queue[idx], ttft[idx])
        if timed is not None:
            out[pd.Timestamp(b)] = timed
    return out


SERIES_SPLIT = ("server_ttft_ms", "server_queue_ms", "server_prefill_ms")
FROM_REQUESTS = "per-request server timings"
FROM_HISTOGRAMS = "server histograms"


def server_series(
    hist_rows: pd.DataFrame, timed: Mapping[pd.Timestamp, Mapping[str, Any]]
) -> pd.DataFrame:
    """The bucketed server rows (`bucketed`) with the server's TTFT split into queue + prefill
    per bucket, as per level (_split_of): from the requests' own timings where that bucket's
    requests report the part (`timed`, bucket_request_timings), else from the histograms.
    The histograms' means stay as `hist_ttft_ms` / `hist_queue_ms`; `timed_requests` counts
    the bucket's requests that reported a prefill time; `<column>_source` names where each of
    SERIES_SPLIT came from (FROM_REQUESTS, FROM_HISTOGRAMS, or None where neither knows)."""
    rows = hist_rows.rename(
        columns={"server_ttft_ms": "hist_ttft_ms", "server_queue_ms": "hist_queue_ms"}
    )
    if timed:
        buckets = pd.DataFrame({"bucket": pd.to_datetime(list(timed), utc=True)})
        rows = (  # `bucketed` always has its columns, rows or not
            rows.merge(buckets, on="bucket", how="outer")
            if len(rows)
            else buckets.reindex(columns=rows.columns)
        )
        rows = rows.sort_values("bucket").reset_index(drop=True)
    split = [
        _split_of(_num(ttft), _num(queue), timed.get(pd.Timestamp(b)), counted=False)
        for b, ttft, queue in zip(
            rows["bucket"], rows["hist_ttft_ms"], rows["hist_queue_ms"], strict=True
        )
    ]
    for col in SERIES_SPLIT:
        rows[col] = [sp[col] for sp in split]
        rows[f"{col}_source"] = [sp["sources"][col] for sp in split]
    rows["timed_requests"] = [sp["timed_requests"] for sp in split]
    return rows.reset_index(drop=True)


def _num(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else float(x)


SPLIT_LINES = (
    ("server_queue_ms", "server queue"),
    ("server_prefill_ms", "server prefill + first step"),
    ("server_ttft_ms", "server TTFT"),
)  # the charts' lines of the server's TTFT split, each drawn once per source


def series_by_source(rows: pd.DataFrame, column: str) -> list[tuple[str, pd.Series]]:
    """`column` of server_series' rows as one series per source (values where it came from
    that source, NaN elsewhere), for charts that label each line with where it came from."""
    src = f"{column}_source"
    if rows.empty or column not in rows or src not in rows:
        return []
    values = pd.to_numeric(rows[column], errors="coerce")
    return [
        (str(name), values.where(rows[src] == name))
        for name in (FROM_REQUESTS, FROM_HISTOGRAMS)
        if ((rows[src] == name) & values.notna()).any()
    ]


def _split_of(
    hist_ttft: float | None,
    hist_queue: float | None,
    timed: Mapping[str, Any] | None,
    *,
    counted: bool = True,
) -> dict[str, Any]:
    """server_ttft_ms = server_queue_ms + server_prefill_ms with the source of each: the
    requests' own timings where they report the part, else the histograms (`counted`: the
    requests' source names how many reported)."""
    hist = FROM_HISTOGRAMS
    hist_prefill = (
        hist_ttft - hist_queue if hist_ttft is not None and hist_queue is not None else None
    )
    t = timed or {}
    req = f"{FROM_REQUESTS}, n={t.get('n', 0)}" if counted else FROM_REQUESTS
    queue, q_src = (t["queue_ms"], req) if t.get("queue_ms") is not None else (hist_queue, hist)
    prefill, p_src = (
        (t["prefill_ms"], req) if t.get("prefill_ms") is not None else (hist_prefill, hist)
    )
    if t.get("ttft_ms") is not None:
        ttft, t_src = t["ttft_ms"], req
    elif hist_ttft is not None:
        ttft, t_src = hist_ttft, hist
    else:
        ttft, t_src = None, None
    return {
        "server_ttft_ms": ttft,
        "server_queue_ms": queue,
        "server_prefill_ms": prefill,
        "timed_requests": t.get("n", 0),
        "sources": {
            "server_ttft_ms": t_src,
            "server_queue_ms": q_src if queue is not None else None,
            "server_prefill_ms": p_src if prefill is not None else None,
        },
    }
