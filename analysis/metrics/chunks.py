"""Chunks and inter-token latency: flat chunk arrays, gaps within a choice, ITL per chunk and per
token."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from analysis.metrics.base import (
    BoolArray,
    FloatArray,
    IntArray,
)
from loadgen.results import formulas
from loadgen.results.choices import grouped_order, has_choices

SUM_BLOCK = 1 << 21  # chunks per block of a per-request sum (16 MB of int64 at a time)


def ptr_of(lengths: npt.ArrayLike) -> IntArray:
    """ChunkArrays.ptr of requests holding `lengths` chunks each: 0, then the running sum."""
    counts = np.asarray(lengths)
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


@dataclass(frozen=True, slots=True)
class ChunkArrays:
    """Every request's chunks concatenated: request i owns `offsets_us[ptr[i]:ptr[i+1]]` (µs from
    send) and `tokens[ptr[i]:ptr[i+1]]` (tokens attributed to each chunk)."""

    offsets_us: npt.NDArray[np.integer[Any]]  # int64, or int32 from analysis.store.fastload
    tokens: npt.NDArray[np.integer[Any]]  # int64, or int16 from analysis.store.fastload
    ptr: IntArray
    choices: npt.NDArray[np.integer[Any]] | None = None  # per chunk its choice (n > 1), or None

    @property
    def n_requests(self) -> int:
        return int(self.ptr.size - 1)

    def tokens_per_request(self) -> IntArray:
        """Each request's tokens (the sum of its chunks'), int64. Summed a block of requests
        at a time (about SUM_BLOCK chunks): a sum widened to int64 in one call converts every
        chunk first, 8 bytes each, a gigabyte of fresh memory for a 1M x 128 run (1.8 s of
        page faults against 0.16 s)."""
        total = np.zeros(self.n_requests, dtype=np.int64)
        nonempty = np.flatnonzero(np.diff(self.ptr) > 0)
        if not nonempty.size:
            return total
        starts = self.ptr[:-1][nonempty]
        out = np.empty(starts.size, dtype=np.int64)
        step = max(1, int(starts.size * SUM_BLOCK // max(self.tokens.size, 1)))
        for a in range(0, starts.size, step):
            b = min(a + step, starts.size)
            lo, hi = int(starts[a]), int(self.ptr[nonempty[b - 1] + 1])
            out[a:b] = np.add.reduceat(self.tokens[lo:hi], starts[a:b] - lo, dtype=np.int64)
        total[nonempty] = out
        return total

    def take(self, rows: BoolArray) -> ChunkArrays:
        """The chunks of the selected requests (`rows`: one bool per request), in their order."""
        sel = np.asarray(rows, dtype=bool)
        if sel.size != self.n_requests:
            raise ValueError(
                f"rows select from {sel.size} requests, the chunks cover {self.n_requests}"
            )
        lengths = np.diff(self.ptr)
        keep = np.repeat(sel, lengths)
        ptr = ptr_of(lengths[sel])
        choices = None if self.choices is None else self.choices[keep]
        return ChunkArrays(self.offsets_us[keep], self.tokens[keep], ptr, choices)

    @classmethod
    def from_lists(cls, offsets: Iterable[Any], tokens: Iterable[Any]) -> ChunkArrays:
        offs = [np.asarray(a, dtype=np.int64) for a in offsets]
        toks = [np.asarray(a, dtype=np.int64) for a in tokens]
        if len(offs) != len(toks):
            raise ValueError("offsets and tokens have different numbers of requests")
        lengths = np.fromiter((a.size for a in offs), dtype=np.int64, count=len(offs))
        if any(a.size != b.size for a, b in zip(offs, toks, strict=True)):
            raise ValueError("a request's chunk_offsets_us and chunk_tokens differ in length")
        ptr = ptr_of(lengths)
        empty = np.zeros(0, dtype=np.int64)
        return cls(
            offsets_us=np.concatenate(offs) if offs else empty,
            tokens=np.concatenate(toks) if toks else empty,
            ptr=ptr,
        )

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> ChunkArrays:
        out = cls.from_lists(df["chunk_offsets_us"], df["chunk_tokens"])
        if "chunk_choices" not in df or not any(has_choices(c) for c in df["chunk_choices"]):
            return out
        per = [
            np.asarray(c, dtype=np.int64) if has_choices(c) else np.zeros(len(o), dtype=np.int64)
            for c, o in zip(df["chunk_choices"], df["chunk_offsets_us"], strict=True)
        ]
        return cls(out.offsets_us, out.tokens, out.ptr, np.concatenate(per))


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
    each selected request: loadgen.results.formulas.token_gaps of every selected request at once.
    Chunks with no tokens (role-only, usage-only) are skipped. `labels`
    (one int per request; default the row index) is carried to each gap.

    When every chunk carries tokens, no per-chunk row index is built (memory: one bool per
    chunk); otherwise an int32 row index per chunk is. With `n > 1` choices (`chunks.choices`)
    the gaps are within each choice of each request (loadgen/results/choices.py)."""
    lengths = np.diff(chunks.ptr)
    if chunks.choices is not None:
        return _choice_gaps(chunks, rows, labels)
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


def _choice_gaps(
    chunks: ChunkArrays, rows: BoolArray | None, labels: npt.NDArray[np.integer[Any]] | None
) -> Gaps:
    """chunk_gaps when chunks carry choices: each request's chunks grouped by choice."""
    assert chunks.choices is not None
    lab_src = labels if labels is not None else np.arange(chunks.n_requests, dtype=np.int64)
    owner = np.repeat(np.arange(chunks.n_requests, dtype=np.int64), np.diff(chunks.ptr))
    order, key = grouped_order(owner, chunks.choices)
    keep = chunks.tokens[order] > 0
    if rows is not None:
        keep &= np.asarray(rows, dtype=bool)[owner[order]]
    r, k = owner[order][keep], key[keep]
    off, tok = chunks.offsets_us[order][keep], chunks.tokens[order][keep]
    same = k[1:] == k[:-1]
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
    """ITL per token (the ITL reported): loadgen.results.formulas.itl_per_token_ms of the selected
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
