"""Output throughput over time by the one definition every table uses (analysis.metrics
.tokens_arrived: each chunk's tokens count at its arrival, sent_at + its offset, whatever the
request's outcome), per time bucket and region on the buckets of analysis.store.load.timeseries
(aligned to the Unix epoch). A chart's tokens/s over a window of whole buckets is the table's
tokens/s for that window, to the token.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from analysis import metrics as m

MAX_CHUNKS = 2_000_000  # chunks expanded at once for the requests that cross a bucket's edge


def tokens_by_bucket(arr: m.Arrivals, bucket_ns: int, rows: m.BoolArray) -> dict[int, int]:
    """Output tokens that arrived in each bucket [k * bucket_ns, (k + 1) * bucket_ns) (ns since
    the epoch), by bucket index k, over the selected requests: `tokens_arrived` of each bucket's
    window. A request whose chunks all arrived in one bucket counts whole there; the others are
    split chunk by chunk, a bounded number of chunks at a time."""
    sel = arr.has & rows
    first_b, last_b = arr.first // bucket_ns, arr.last // bucket_ns
    whole = sel & (first_b == last_b)
    out: dict[int, int] = {}
    if whole.any():
        keys, inverse = np.unique(first_b[whole], return_inverse=True)
        sums = np.bincount(inverse, weights=arr.total[whole]).astype(np.int64)
        out.update(zip(keys.tolist(), sums.tolist(), strict=True))
    split = np.flatnonzero(sel & (first_b != last_b))
    if split.size == 0:
        return out
    ptr = arr.chunks.ptr
    lengths = ptr[split + 1] - ptr[split]
    ends = np.cumsum(lengths)
    cuts = np.searchsorted(ends, np.arange(MAX_CHUNKS, int(ends[-1]), MAX_CHUNKS), side="right")
    for part in np.split(np.arange(split.size), cuts):
        if part.size == 0:
            continue
        reqs, n = split[part], lengths[part]
        starts = np.repeat(ptr[reqs], n)
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        idx = starts + within
        at = np.repeat(arr.times.sent_at[reqs], n) + arr.chunks.offsets_us[idx].astype(
            np.int64
        ) * np.int64(1000)
        keys, inverse = np.unique(at // bucket_ns, return_inverse=True)
        sums = np.bincount(inverse, weights=arr.chunks.tokens[idx].astype(np.int64))
        for k, s in zip(keys.tolist(), sums.astype(np.int64).tolist(), strict=True):
            out[k] = out.get(k, 0) + s
    return out


def arrival_throughput(
    df: pd.DataFrame,
    chunks: m.ChunkArrays,
    bucket_s: float,
    *,
    by: Literal["region", "none"] = "region",
) -> pd.DataFrame:
    """Per bucket (its start, UTC) and region ("all" with `by="none"`): `output_tokens_per_s`,
    the tokens that arrived in it (`tokens_by_bucket`) / bucket_s."""
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive (got {bucket_s})")
    bucket_ns = round(bucket_s * 1e9)
    arr = m.Arrivals.of(chunks, m.Timeline.from_frame(df))
    regions = df["region"].astype(object).to_numpy() if by == "region" else None
    names = sorted(set(regions.tolist())) if regions is not None else ["all"]
    rows: list[tuple[pd.Timestamp, str, float]] = []
    for name in names:
        mask = regions == name if regions is not None else np.ones(len(df), dtype=bool)
        for k, tokens in sorted(tokens_by_bucket(arr, bucket_ns, mask).items()):
            at = pd.Timestamp(k * bucket_ns, unit="ns", tz="UTC")
            rows.append((at, str(name), tokens / bucket_s))
    return pd.DataFrame(rows, columns=["bucket", "region", "output_tokens_per_s"])


def with_arrival_throughput(
    ts: pd.DataFrame,
    df: pd.DataFrame,
    chunks: m.ChunkArrays,
    bucket_s: float,
    *,
    by: Literal["region", "none"] = "region",
) -> pd.DataFrame:
    """`ts` (analysis.store.load.timeseries, same bucket_s and `by`) with its tokens/s counted
    as every table counts them (`arrival_throughput`) instead of the shards' per-second ticks:
    0 in a bucket where no token arrived, and a row for a bucket tokens arrived in but no tick
    covers."""
    arrived = arrival_throughput(df, chunks, bucket_s, by=by)
    base = ts.drop(columns=["output_tokens_per_s"], errors="ignore")
    base = base.assign(bucket=pd.to_datetime(base["bucket"], utc=True))  # empty: object dtype
    arrived["bucket"] = pd.to_datetime(arrived["bucket"], utc=True).astype(base["bucket"].dtype)
    out = base.merge(arrived, on=["bucket", "region"], how="outer")
    for col in ("output_tokens_per_s", "ok_per_s", "failed_per_s"):  # nothing in it: zero
        if col in out:
            out[col] = out[col].fillna(0.0).astype("float64")
    return out.sort_values(["bucket", "region"]).reset_index(drop=True)
