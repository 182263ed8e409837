"""Output throughput over time by the one definition every table uses (analysis.metrics
.tokens_arrived: each chunk's tokens count at its arrival, sent_at + its offset, whatever the
request's outcome), per time bucket and region on the buckets of analysis.store.buckets.timeseries
(aligned to the Unix epoch). A chart's tokens/s over a window of whole buckets is the table's
tokens/s for that window, to the token.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.stats.percentiles import sorted_codes

MAX_CHUNKS = 2_000_000  # chunks (and bucket cells) taken at once for requests crossing an edge
# bisect a request's offsets at each bucket edge it crosses when edges are this much rarer than
# its chunks and the part's running sum (a quarter of the work per chunk) is not too long: 1-s
# buckets of 64-chunk requests, 179 -> 86 ms per 100k; else take every chunk (0.1-s buckets:
# 186 ms chunk by chunk, 379 ms by bisection; 60-s buckets: 7 ms, 27 ms)
BISECT_EDGES_PER_CHUNK = 8
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
    selected requests (`group`: a code >= 0 per request), by (g, k), sorted: the cells of
    `group_bucket_sums`."""
    g, k, sums = group_bucket_sums(arr, bucket_ns, rows, group)
    return dict(zip(zip(g.tolist(), k.tolist(), strict=True), sums.tolist(), strict=True))


def group_bucket_sums(
    arr: m.Arrivals, bucket_ns: int, rows: m.BoolArray, group: m.IntArray
) -> tuple[m.IntArray, m.IntArray, m.IntArray]:
    """(g, k, tokens) arrays, sorted by (g, k): the output tokens that arrived in bucket k per
    group g of the selected requests (`group`: a code >= 0 per request); a bucket that a chunk
    of the group arrived in is there even when its chunks carried no token. A request whose
    chunks all arrived in one bucket counts whole there; the others are split at each bucket
    edge they cross (`_add_split`, by bisection) or chunk by chunk (`_add_by_chunk`), a bounded
    number of chunks and cells at a time. Sums are of integers: exact."""
    sel = arr.has & rows
    if not sel.any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    first_b, last_b = arr.first // bucket_ns, arr.last // bucket_ns
    k0 = int(first_b[sel].min())
    width = int(last_b[sel].max()) - k0 + 1
    cells = _Cells(width * (int(group[sel].max()) + 1))
    whole = np.flatnonzero(sel & (first_b == last_b))
    cells.add(group[whole] * width + (first_b[whole] - k0), arr.total[whole])
    split = np.flatnonzero(sel & (first_b != last_b))
    if split.size:  # in parts: their chunks (whole requests' between them too) and cells bounded
        ptr = arr.chunks.ptr
        cost = (ptr[split + 1] - ptr[split[0]]) + np.cumsum(last_b[split] - first_b[split] + 1)
        marks = np.arange(MAX_CHUNKS, int(cost[-1]) + 1, MAX_CHUNKS)
        for part in np.split(split, np.searchsorted(cost, marks, side="right")):
            if part.size == 0:
                continue
            edges = int((last_b[part] - first_b[part]).sum())
            span = int(ptr[part[-1] + 1] - ptr[part[0]])  # the running sum's length
            own = int((ptr[part + 1] - ptr[part]).sum())  # the chunks taken one by one
            if edges * BISECT_EDGES_PER_CHUNK + span // 4 < own:
                _add_split(cells, arr, bucket_ns, part, group, first_b, last_b, k0, width)
            else:
                _add_by_chunk(cells, arr, bucket_ns, part, group, k0, width)
    keys, sums = cells.result()
    g, k = np.divmod(keys, width)
    return g, k + k0, sums


def _add_split(
    cells: _Cells,
    arr: m.Arrivals,
    bucket_ns: int,
    reqs: m.IntArray,
    group: m.IntArray,
    first_b: m.IntArray,
    last_b: m.IntArray,
    k0: int,
    width: int,
) -> None:
    """Add requests whose chunks arrived in more than one bucket, without a per-chunk pass: per
    request, the first chunk at or after each inner bucket edge is found by bisection on its
    offsets (sorted: chunks are stored in arrival order), and each bucket's tokens are a
    difference of the part's running token sum. Integer arithmetic throughout: a chunk is in
    bucket k when sent_at + offset_us * 1000 >= k * bucket_ns, i.e. offset_us >= ceil((k *
    bucket_ns - sent_at) / 1000)."""
    ptr, offsets = arr.chunks.ptr, arr.chunks.offsets_us
    base = int(ptr[reqs[0]])
    running = np.zeros(int(ptr[reqs[-1] + 1]) - base + 1, dtype=np.int64)
    np.cumsum(arr.chunks.tokens[base : int(ptr[reqs[-1] + 1])], out=running[1:])
    n_buckets = last_b[reqs] - first_b[reqs] + 1
    edges = n_buckets - 1  # inner edges of each request (>= 1)
    owner = np.repeat(reqs, edges)
    nth = _within(edges)
    edge_ns = (first_b[owner] + nth + 1) * bucket_ns
    wanted = -((arr.times.sent_at[owner] - edge_ns) // 1000)  # ceil((edge - sent_at) / 1000)
    lo, hi = ptr[owner].astype(np.int64), ptr[owner + 1].astype(np.int64)
    while True:  # bisection, all edges at once: lo ends at the first offset >= wanted
        open_ = lo < hi
        if not open_.any():
            break
        mid = (lo + hi) // 2
        below = open_ & (offsets[np.minimum(mid, offsets.size - 1)].astype(np.int64) < wanted)
        lo = np.where(below, mid + 1, lo)
        hi = np.where(open_ & ~below, mid, hi)
    # bucket j of a request: chunks [start_j, end_j), its first from ptr, its last to ptr + 1
    cell_req = np.repeat(reqs, n_buckets)
    j = _within(n_buckets)
    first_edge = np.repeat(np.cumsum(edges) - edges, n_buckets)  # its edges' index in `lo`
    last_j = np.repeat(n_buckets - 1, n_buckets)
    start = np.where(j == 0, ptr[cell_req], lo[np.maximum(first_edge + j - 1, 0)])
    end = np.where(j == last_j, ptr[cell_req + 1], lo[np.minimum(first_edge + j, lo.size - 1)])
    touched = end > start  # a bucket reached by a chunk, even one without tokens
    tokens = running[end[touched] - base] - running[start[touched] - base]
    bucket = first_b[cell_req[touched]] + j[touched] - k0
    cells.add(group[cell_req[touched]] * width + bucket, tokens)


def _add_by_chunk(
    cells: _Cells,
    arr: m.Arrivals,
    bucket_ns: int,
    reqs: m.IntArray,
    group: m.IntArray,
    k0: int,
    width: int,
) -> None:
    """Add requests whose chunks arrived in more than one bucket chunk by chunk: each chunk's
    arrival, its bucket, its tokens. For buckets short against the requests, where most chunks
    sit near an edge anyway."""
    ptr = arr.chunks.ptr
    n = ptr[reqs + 1] - ptr[reqs]
    idx = np.repeat(ptr[reqs], n) + _within(n)
    at = np.repeat(arr.times.sent_at[reqs], n) + arr.chunks.offsets_us[idx].astype(
        np.int64
    ) * np.int64(1000)
    cells.add(np.repeat(group[reqs] * width, n) + (at // bucket_ns - k0), arr.chunks.tokens[idx])


def _within(counts: m.IntArray) -> m.IntArray:
    """0, 1, ..., c - 1 for each count c, concatenated: an item's place within its request."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


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
    if by == "region":  # codes into the regions sorted by name
        code, names = sorted_codes(df["region"])
    else:
        code, names = np.zeros(len(df), dtype=np.int64), ["all"]
    g, k, tokens = group_bucket_sums(arr, bucket_ns, code >= 0, np.maximum(code, 0))
    return pd.DataFrame(
        {
            "bucket": pd.to_datetime(k * bucket_ns, unit="ns", utc=True),
            "region": np.asarray(names, dtype=object)[g],
            "output_tokens_per_s": tokens / bucket_s,
        }
    )


DENSE_CELLS_PER_ROW = 4  # `completions` counts on the whole grid of cells up to this many a row
DENSE_CELLS_MIN = 1 << 16


def completions(
    df: pd.DataFrame, bucket_s: float, *, by: Literal["region", "none"] = "region"
) -> pd.DataFrame:
    """Per bucket (its start, UTC) and region: `ok_per_s` and `failed_per_s`, the requests
    that ended in it by outcome / bucket_s, where a request ends at scheduled_at + end_ns to
    the microsecond (a request never sent: at scheduled_at), the buckets and rounding of
    analysis.store.buckets.timeseries' count in the store; rows by bucket, then region."""
    width_us = round(bucket_s * 1e6)  # the store's make_interval(secs => w): rint(w * 1e6) µs
    cols = ["bucket", "region", "ok_per_s", "failed_per_s"]
    if df.empty or width_us <= 0:
        return pd.DataFrame(
            {
                "bucket": pd.Series(dtype="datetime64[us, UTC]"),
                "region": pd.Series(dtype=object),
                **{c: pd.Series(dtype="float64") for c in cols[2:]},
            }
        )
    end_ns = df["end_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    added_us = np.rint(np.where(np.isnan(end_ns), 0.0, end_ns) / 1e9 * 1e6).astype(np.int64)
    k = (m.epoch_ns(df["scheduled_at"]) // 1000 + added_us) // width_us
    if by == "region":
        code, names = sorted_codes(df["region"])
    else:
        code, names = np.zeros(len(df), dtype=np.int64), ["all"]
    k0, groups = int(k.min()), int(code.max()) + 1
    cell = (k - k0) * groups + code  # by bucket, then region
    ok = (df["outcome"] == "ok").to_numpy(dtype=bool)
    if int(cell.max()) < DENSE_CELLS_PER_ROW * cell.size + DENSE_CELLS_MIN:
        # counted on the whole grid of cells, the empty ones dropped after: no sort of every
        # row's cell (np.unique's, 1.3 s at 10M requests)
        dense_all = np.bincount(cell)
        seen = np.flatnonzero(dense_all)
        n_all = dense_all[seen].astype(np.float64)
        n_ok = np.bincount(cell, weights=ok.astype(np.float64))[seen]
    else:  # few rows over a long grid (fine buckets of a long, sparse run)
        seen, inverse = np.unique(cell, return_inverse=True)
        n_ok = np.bincount(inverse, weights=ok.astype(np.float64), minlength=seen.size)
        n_all = np.bincount(inverse, minlength=seen.size).astype(np.float64)
    bucket, group = np.divmod(seen, groups)
    return pd.DataFrame(
        {
            "bucket": pd.to_datetime((bucket + k0) * width_us, unit="us", utc=True),
            "region": np.asarray(names, dtype=object)[group],
            "ok_per_s": n_ok / bucket_s,
            "failed_per_s": (n_all - n_ok) / bucket_s,
        }
    )


def with_arrival_throughput(
    ts: pd.DataFrame,
    df: pd.DataFrame,
    chunks: m.ChunkArrays,
    bucket_s: float,
    *,
    by: Literal["region", "none"] = "region",
) -> pd.DataFrame:
    """`ts` (analysis.store.buckets.timeseries, same bucket_s and `by`; `requests=False` spares
    the store a pass) with its tokens/s counted as every table counts them
    (`arrival_throughput`) instead of the shards' per-second ticks, and its ok/s and failed/s
    counted from the frame (`completions`): 0 in a bucket where no token arrived or no request
    ended, and a row for a bucket that tokens arrived or requests ended in but no tick covers."""
    arrived = arrival_throughput(df, chunks, bucket_s, by=by)
    ended = completions(df, bucket_s, by=by)
    base = ts.drop(columns=["output_tokens_per_s", "ok_per_s", "failed_per_s"], errors="ignore")
    base = base.assign(bucket=pd.to_datetime(base["bucket"], utc=True))  # empty: object dtype
    out = base
    for side in (arrived, ended):
        side["bucket"] = pd.to_datetime(side["bucket"], utc=True).astype(base["bucket"].dtype)
        out = out.merge(side, on=["bucket", "region"], how="outer")
    for col in ("output_tokens_per_s", "ok_per_s", "failed_per_s"):  # nothing in it: zero
        out[col] = out[col].fillna(0.0).astype("float64")
    return out.sort_values(["bucket", "region"]).reset_index(drop=True)
