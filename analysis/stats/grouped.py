"""Exact percentiles of many groups of one large weighted sample in two passes: the per-token
ITL spectra of every (level, region) of a run of 100 M+ chunks without expanding tokens or
splitting arrays. A value v with weight k counts as k copies of v, so the results equal
np.percentile(np.repeat(v, k)[group], q, method="linear") exactly.

Pass 1 counts (weighted) keys made of each value's float64 top bits (sign, exponent, 12
mantissa bits: monotone for v >= 0) per group; ranks are located in those histograms. Pass 2
keeps only values in the bins holding wanted ranks, which are then sorted. Work is done in
blocks so temporaries stay small; with a `pick` function the keys of pass 1 are kept (4 bytes
a value) and pass 2 reads only the candidates' values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from analysis.stats.ranks import (
    KEY_SHIFT,
    band_from,
    band_sample_ranks,
    float_key,
    lerp,
    linear_ranks,
)

BLOCK = 1 << 21
SUB_BLOCK = 1 << 16  # elements per step within a block: temporaries stay in the CPU's cache

# yields, for a block [i, j) of the sample, (values float64 >= 0, labels int, weights int)
BlockFn = Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]
# (values, labels, weights) at the given 0-based positions of the sample (see `pick` below)
PickFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
# writes the histogram cells of the sample's [i, j) into `out` (int64, j - i): (label + 1) * nb
# + bin, row 0 (any bin) for left-out values; returns the cells and weights - 1 of the values
# of weight > 1, or None when there are none (see `CellBins` below)
CellFn = Callable[[int, int, np.ndarray], tuple[np.ndarray, np.ndarray] | None]


class CellBins:
    """A caller's own binning for `grouped_order_statistics`: `nb` bins per label and `fill`
    (a CellFn). The bin must be a non-decreasing function of the true value (as `pick` gives
    it); bins only filter, so any such function keeps the results exact."""

    def __init__(self, nb: int, fill: CellFn) -> None:
        self.nb, self.fill = nb, fill


FLOOR = 2.0**-20  # values below share the lowest bin (the candidates are sorted anyway)


def _key_range(value_max: float) -> tuple[int, int]:
    return float_key(FLOOR), float_key(max(value_max, FLOOR))


def _combined(
    v: np.ndarray, lab: np.ndarray, kmin: int, kmax: int, nb: int, out: np.ndarray | None = None
) -> np.ndarray:
    """Histogram cell of each value: (label + 1) * nb + bin, row 0 for label -1 (left out).
    The bin is the float64's top bits clamped to [kmin, kmax], minus kmin: monotone in v for
    v >= 0; every value below FLOOR (and any negative) lands in bin 0 and every value above the
    bound in the top bin, so the result stays exact: bins are only a filter."""
    k = np.right_shift(v.view(np.int64), KEY_SHIFT, out=out)
    np.maximum(k, kmin, out=k)
    np.minimum(k, kmax, out=k)
    k += np.multiply(lab, nb, dtype=np.int64)
    k += nb - kmin
    return k


@dataclass(frozen=True, slots=True)
class _Cells:
    """How a sample's values become histogram cells: `nb` bins per label and `fill` (a CellFn);
    `kmin`/`kmax` the clamp of the float keys when the bins are ours (`_combined`), else 0."""

    nb: int
    fill: CellFn
    kmin: int = 0
    kmax: int = 0


@dataclass(frozen=True, slots=True)
class _Located:
    """Where a set's wanted ranks fall: the distinct ranks, the inverse that restores the
    caller's order, the bin of each and the weight in the set's earlier bins."""

    ranks: np.ndarray
    inverse: np.ndarray
    bins: np.ndarray
    before: np.ndarray


def grouped_order_statistics(
    n: int,
    block: BlockFn,
    n_labels: int,
    sets: Mapping[str, Sequence[int]],
    ranks: Callable[[str, int], np.ndarray],
    *,
    value_max: float | None = None,
    pick: PickFn | None = None,
    binning: CellBins | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """For each set (a union of labels) of total weight t > 0, the values at the 0-based ranks
    `ranks(set, t)` (within 0..t-1) of its sorted, weight-expanded sample; and every set's
    total weight. Labels < 0 are ignored; values must be finite. `value_max` (an upper bound
    of the values, for sizing the bins) saves a pass when given.

    With `pick`, `block` may give any non-decreasing function of the true values instead of
    the values (cheaper to compute, e.g. before a unit conversion; `value_max` in its units):
    it only bins them. Each value's bin is then kept (4 bytes each) and the last pass reads the
    true values, labels and weights of the candidates alone through `pick(positions)`.

    With `binning` (and `pick`, required then) the caller bins the values itself (e.g. integers
    without a float conversion) and `block` is not called."""
    if n <= 0:
        return {}, {s: 0 for s in sets}
    cells = _cells(n, block, binning, pick, value_max)
    # row 0 of the histogram takes the left-out values (label -1): no compaction per block
    size = (n_labels + 1) * cells.nb
    if binning is not None and size >= 2**31:
        raise ValueError("too many bins")
    kept = np.empty(n, dtype=np.int32) if pick is not None and size < 2**31 else None
    hist = _histogram(n, cells.fill, size, kept)[cells.nb :].reshape(n_labels, cells.nb)
    wanted, located, totals = _locate(hist, sets, ranks)
    wanted_flat = np.r_[np.zeros(cells.nb, dtype=bool), wanted.ravel()]  # row 0: left out
    found = _candidates(n, block, pick, kept, wanted_flat, cells)
    del kept  # free the kept cells (4 bytes a value) before sorting
    return _select(found, sets, located, n_labels), totals


def _halves(n: int) -> list[int]:
    """Bounds of the two halves of the blocks two threads share (numpy releases the GIL in most
    of the passes), or of one range for small samples."""
    return [0, (n // BLOCK + 1) // 2 * BLOCK, n] if n > 4 * BLOCK else [0, n]


def _in_halves(n: int, fn: Callable[[int, int], Any]) -> list[Any]:
    halves = _halves(n)
    with ThreadPoolExecutor(max_workers=len(halves) - 1) as pool:
        return list(pool.map(fn, halves[:-1], halves[1:]))


def _cells(
    n: int,
    block: BlockFn,
    binning: CellBins | None,
    pick: PickFn | None,
    value_max: float | None,
) -> _Cells:
    """The caller's `binning`, or our own bins of the float keys over [FLOOR, value_max]
    (`value_max` found by a pass over the values when not given)."""
    if binning is not None:
        if pick is None:
            raise ValueError("binning needs pick")
        return _Cells(binning.nb, binning.fill)
    if value_max is None:
        value_max = _value_max(n, block)
    kmin, kmax = _key_range(value_max)
    nb = kmax - kmin + 1

    def fill(a: int, b: int, out: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        v, lab, w = block(a, b)
        comb = _combined(v, lab, kmin, kmax, nb, out=out)
        heavy = w > 1  # weight k counts k times: the k - 1 more are added in bulk
        return (comb[heavy], w[heavy] - 1) if bool(heavy.any()) else None

    return _Cells(nb, fill, kmin, kmax)


def _value_max(n: int, block: BlockFn) -> float:
    """The largest value not left out (at least FLOOR); ValueError on a non-finite one."""
    value_max = FLOOR
    for i in range(0, n, BLOCK):
        v, lab, _ = block(i, min(i + BLOCK, n))
        sel = v[lab >= 0]
        if sel.size:
            if not np.isfinite(sel).all():
                raise ValueError("grouped percentiles need finite values")
            value_max = max(value_max, float(sel.max()))
    return value_max


def _histogram(n: int, fill: CellFn, size: int, kept: np.ndarray | None) -> np.ndarray:
    """Pass 1: the weighted histogram of every cell (keeping each value's cell in `kept`)."""

    def count(lo: int, hi: int) -> np.ndarray:
        """The weighted histogram of blocks [lo, hi) (keeping their cells when `kept`)."""
        hist = np.zeros(size, dtype=np.int64)
        extra: list[tuple[np.ndarray, np.ndarray]] = []  # cells and weights - 1 of heavy values
        held = 0

        def add_extra() -> None:
            cells = np.concatenate([e[0] for e in extra])
            more = np.concatenate([e[1] for e in extra]).astype(np.float64)
            hist[:] += np.bincount(cells, weights=more, minlength=size).astype(np.int64)
            extra.clear()

        cells = np.empty(min(BLOCK, max(hi - lo, 0)), dtype=np.int64)
        sub = min(SUB_BLOCK, BLOCK)
        for i in range(lo, hi, BLOCK):
            j = min(i + BLOCK, hi)
            # values and cells a cache-sized piece at a time; one bincount per block
            for a in range(i, j, sub):
                b = min(a + sub, j)
                more = fill(a, b, cells[a - i : b - i])
                if more is not None:
                    extra.append(more)
                    held += more[0].size
            if kept is not None:
                kept[i:j] = cells[: j - i]
            hist += np.bincount(cells[: j - i], minlength=size)
            if held > 8 * BLOCK:
                add_extra()
                held = 0
        if extra:
            add_extra()
        return hist

    out: np.ndarray = np.sum(_in_halves(n, count), axis=0)
    return out


def _locate(
    hist: np.ndarray, sets: Mapping[str, Sequence[int]], ranks: Callable[[str, int], np.ndarray]
) -> tuple[np.ndarray, dict[str, _Located], dict[str, int]]:
    """From the per-label histograms (n_labels, nb): the cells holding any set's wanted ranks,
    where each set's ranks fall, and every set's total weight."""
    wanted = np.zeros(hist.shape, dtype=bool)
    located: dict[str, _Located] = {}
    totals: dict[str, int] = {}
    for name, labels in sets.items():
        cum = np.cumsum(hist[list(labels)].sum(axis=0))
        totals[name] = int(cum[-1]) if cum.size else 0
        if totals[name] == 0:
            continue
        r = np.asarray(ranks(name, totals[name]), dtype=np.int64)
        uniq, inverse = np.unique(r, return_inverse=True)
        bins = np.searchsorted(cum, uniq, side="right")
        before = np.where(bins > 0, cum[np.maximum(bins - 1, 0)], 0)
        wanted[np.ix_(np.asarray(labels, dtype=np.int64), np.unique(bins))] = True
        located[name] = _Located(uniq, inverse, bins, before)
    return wanted, located, totals


def _candidates(
    n: int,
    block: BlockFn,
    pick: PickFn | None,
    kept: np.ndarray | None,
    wanted_flat: np.ndarray,
    cells: _Cells,
) -> tuple[np.ndarray, ...]:
    """Pass 2: (values, labels, weights, bins) of the values in wanted cells."""
    nb, kmin, kmax = cells.nb, cells.kmin, cells.kmax

    def in_range(lo: int, hi: int) -> tuple[np.ndarray, ...]:
        """(values, labels, weights, bins) of blocks [lo, hi) in the wanted cells."""
        parts: list[tuple[np.ndarray, ...]] = []
        for i in range(lo, hi, BLOCK):
            if kept is not None and pick is not None:
                comb = kept[i : min(i + BLOCK, hi)]
                pos = np.flatnonzero(wanted_flat[comb])
                v, lab, w = pick(pos + i)
                comb = comb[pos].astype(np.int64)
            else:
                v, lab, w = block(i, min(i + BLOCK, hi))
                comb = _combined(v, lab, kmin, kmax, nb)
                keep = wanted_flat[comb]
                v, lab, w, comb = v[keep], lab[keep], w[keep], comb[keep]
            parts.append((v, lab, w, comb - (lab.astype(np.int64) + 1) * nb))
        return tuple(np.concatenate([p[f] for p in parts]) for f in range(4))

    found = _in_halves(n, in_range)
    return tuple(np.concatenate([f[k] for f in found]) for k in range(4))


def _select(
    found: tuple[np.ndarray, ...],
    sets: Mapping[str, Sequence[int]],
    located: Mapping[str, _Located],
    n_labels: int,
) -> dict[str, np.ndarray]:
    """Each located set's values at its wanted ranks, from the candidates: within the
    rank's bin, the candidate whose cumulative weight (of the set's members) passes it."""
    cv, cl, cw, cb = found
    # sorted by bin, then value: an order of the values too (a value's bin never decreases as
    # the value grows), and the bins stay sorted even when two bins hold equal values
    order = np.lexsort((cv, cb))
    cv, cl, cw, cb = cv[order], cl[order], cw[order], cb[order]
    out: dict[str, np.ndarray] = {}
    for name, labels in sets.items():
        if name not in located:
            continue
        at = located[name]
        member = np.zeros(n_labels + 1, dtype=bool)  # index -1 (left out) stays False
        member[np.asarray(list(labels), dtype=np.int64)] = True
        mine = member[cl]
        v, w, b = cv[mine], cw[mine].astype(np.int64), cb[mine]
        cumw = np.cumsum(w)
        seg_start = np.searchsorted(b, at.bins, side="left")
        base = np.where(seg_start > 0, cumw[np.maximum(seg_start - 1, 0)], 0)
        pos = np.searchsorted(cumw, base + (at.ranks - at.before), side="right")
        out[name] = v[pos][at.inverse]
    return out


def spectra_from_blocks(
    n: int,
    block: BlockFn,
    n_labels: int,
    sets: Mapping[str, Sequence[int]],
    grid: npt.ArrayLike,
    *,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    exact: bool = True,
    value_max: float | None = None,
    pick: PickFn | None = None,
    binning: CellBins | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Per set: (value, lower, upper, n) at the percentiles `grid` (linear interpolation; bands
    as analysis.stats.percentiles.bootstrap_band's, from analysis.stats.ranks: exact by default,
    `resamples=0` for none). Passes over the data: value range (unless `value_max`), weighted
    histograms per label, candidates in the wanted bins (see `grouped_order_statistics` for
    `pick` and `binning`)."""
    g = np.asarray(grid, dtype=np.float64)
    shapes: dict[str, tuple[int, ...]] = {}

    def ranks(name: str, total: int) -> np.ndarray:
        lo, hi, _ = linear_ranks(total, g)
        if resamples <= 0:
            return np.concatenate([lo, hi])
        idx = band_sample_ranks(total, g, confidence, resamples, exact, seed)
        shapes[name] = idx.shape
        return np.concatenate([lo, hi, idx.ravel()])

    stats, totals = grouped_order_statistics(
        n, block, n_labels, sets, ranks, value_max=value_max, pick=pick, binning=binning
    )
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
    for name in sets:
        if name not in stats:
            nan = np.full(g.shape, np.nan)
            out[name] = (nan, nan.copy(), nan.copy(), 0)
            continue
        total, st = totals[name], stats[name]
        _, _, t = linear_ranks(total, g)
        value = lerp(st[: g.size], st[g.size : 2 * g.size], t)
        if resamples > 0:
            lower, upper = band_from(st[2 * g.size :], shapes[name], confidence, exact)
        else:
            lower, upper = np.full(g.shape, np.nan), np.full(g.shape, np.nan)
        out[name] = (value, lower, upper, total)
    return out
