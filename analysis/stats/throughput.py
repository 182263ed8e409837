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
DENSE_CELLS = 1 << 20  # (group, bucket) cells counted in one array (8 MiB); more: by sorted keys


def tokens_by_bucket(arr: m.Arrivals, bucket_ns: int, rows: m.BoolArray) -> dict[int, int]:
    """Output tokens that arrived in each bucket [k * bucket_ns, (k + 1) * bucket_ns) (ns since
    the epoch), by bucket index k, over the selected requests: `tokens_arrived` of each bucket's
    window (`tokens_by_group_bucket` with one group)."""
    one = np.zeros(arr.has.size, dtype=np.int64)
    return {k: t for (_, k), t in tokens_by_group_bucket(arr, bucket_ns, rows, one).items()}


def tokens_by_group_bucket(
    arr: m.Arrivals, bucket_ns: int, rows: m.BoolArray, group: m.IntArray
) -> dict[tuple[int, int], int]:
    """Output tokens that arrived in each bucket k (as `tokens_by_bucket`) per group g of the
    selected requests (`group`: a code >= 0 per request), by (g, k), sorted; a bucket that a
    chunk of the group arrived in is there even when its chunks carried no token. A request
    whose chunks all arrived in one bucket counts whole there; the others are split chunk by
    chunk, a bounded number of chunks at a time. Sums are of integers: exact."""
    sel = arr.has & rows
    if not sel.any():
        return {}
    first_b, last_b = arr.first // bucket_ns, arr.last // bucket_ns
    k0 = int(first_b[sel].min())
    width = int(last_b[sel].max()) - k0 + 1
    cells = _Cells(width * (int(group[sel].max()) + 1))
    whole = np.flatnonzero(sel & (first_b == last_b))
    cells.add(group[whole] * width + (first_b[whole] - k0), arr.total[whole])
    split = np.flatnonzero(sel & (first_b != last_b))
    ptr = arr.chunks.ptr
    lengths = ptr[split + 1] - ptr[split]
    ends = np.cumsum(lengths)
    last = int(ends[-1]) if ends.size else 0
    cuts = np.searchsorted(ends, np.arange(MAX_CHUNKS, last, MAX_CHUNKS), side="right")
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
        cells.add(
            np.repeat(group[reqs] * width, n) + (at // bucket_ns - k0), arr.chunks.tokens[idx]
        )
    keys, sums = cells.result()
    g, k = np.divmod(keys, width)
    return dict(zip(zip(g.tolist(), (k + k0).tolist(), strict=True), sums.tolist(), strict=True))


class _Cells:
    """Integer sums per cell index in [0, size), and which cells were touched: one dense count
    when `size` is at most DENSE_CELLS, else per distinct index (sorted)."""

    def __init__(self, size: int) -> None:
        self.dense = size <= DENSE_CELLS
        self.size = size
        self.sums = np.zeros(size if self.dense else 0, dtype=np.int64)
        self.seen = np.zeros(size if self.dense else 0, dtype=bool)
        self.parts: dict[int, int] = {}

    def add(self, index: m.IntArray, values: np.ndarray) -> None:
        if index.size == 0:
            return
        if self.dense:  # float sums of integers below 2**53: exact
            w = np.bincount(index, weights=values, minlength=self.size)
            self.sums += w.astype(np.int64)
            self.seen[index] = True
            return
        keys, inverse = np.unique(index, return_inverse=True)
        sums = np.bincount(inverse, weights=values).astype(np.int64)
        for k, s in zip(keys.tolist(), sums.tolist(), strict=True):
            self.parts[k] = self.parts.get(k, 0) + s

    def result(self) -> tuple[m.IntArray, m.IntArray]:
        """(touched cell indices ascending, their sums)."""
        if self.dense:
            keys = np.flatnonzero(self.seen)
            return keys, self.sums[keys]
        keys = np.array(sorted(self.parts), dtype=np.int64)
        return keys, np.array([self.parts[k] for k in keys.tolist()], dtype=np.int64)


def arrival_throughput(
    df: pd.DataFrame,
    chunks: m.ChunkArrays,
    bucket_s: float,
    *,
    by: Literal["region", "none"] = "region",
) -> pd.DataFrame:
    """Per bucket (its start, UTC) and region ("all" with `by="none"`): `output_tokens_per_s`,
    the tokens that arrived in it (`tokens_by_group_bucket`) / bucket_s; rows by region, then
    bucket."""
    if bucket_s <= 0:
        raise ValueError(f"bucket_s must be positive (got {bucket_s})")
    bucket_ns = round(bucket_s * 1e9)
    arr = m.Arrivals.of(chunks, m.Timeline.from_frame(df))
    regions = df["region"].astype(object).to_numpy() if by == "region" else None
    names = sorted(set(regions.tolist())) if regions is not None else ["all"]
    code = (
        pd.Categorical(regions, categories=names).codes.astype(np.int64)
        if regions is not None
        else np.zeros(len(df), dtype=np.int64)
    )
    counted = tokens_by_group_bucket(arr, bucket_ns, np.ones(len(df), dtype=bool), code)
    rows = [
        (pd.Timestamp(k * bucket_ns, unit="ns", tz="UTC"), str(names[g]), tokens / bucket_s)
        for (g, k), tokens in counted.items()
    ]
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
