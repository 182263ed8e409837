"""Exact percentiles of many groups of one large weighted sample in two passes: the per-token
ITL spectra of every (level, region) of a run of 100 M+ chunks without expanding tokens or
splitting arrays. A value v with weight k counts as k copies of v, so the results equal
np.percentile(np.repeat(v, k)[group], q, method="linear") exactly.

Pass 1 counts (weighted) keys made of each value's float64 top bits (sign, exponent, 12
mantissa bits: monotone for v >= 0) per group; ranks are located in those histograms. Pass 2
keeps only values in the bins holding wanted ranks, which are then sorted. Work is done in
blocks so temporaries stay small.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

BLOCK = 1 << 21
_SHIFT = 40

# yields, for a block [i, j) of the sample, (values float64 >= 0, labels int, weights int)
BlockFn = Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]


FLOOR = 2.0**-20  # values below share the lowest bin (the candidates are sorted anyway)


def _key_range(value_max: float) -> tuple[int, int]:
    lo = int(np.array([FLOOR]).view(np.int64)[0] >> _SHIFT)
    hi = int(np.array([max(value_max, FLOOR)]).view(np.int64)[0] >> _SHIFT)
    return lo, hi


def _keys(v: np.ndarray, kmin: int, kmax: int) -> np.ndarray:
    """Bin of each value: its float64 top bits, clamped to [kmin, kmax], minus kmin. Monotone
    in v for v >= 0; every value below FLOOR (and any negative) lands in bin 0 and every value
    above the bound in the top bin, so the result stays exact: bins are only a filter."""
    k = v.view(np.int64) >> _SHIFT
    np.clip(k, kmin, kmax, out=k)
    k -= kmin
    return k


def grouped_order_statistics(
    n: int,
    block: BlockFn,
    n_labels: int,
    sets: Mapping[str, Sequence[int]],
    ranks: Callable[[str, int], np.ndarray],
    *,
    value_max: float | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """For each set (a union of labels) of total weight t > 0, the values at the 0-based ranks
    `ranks(set, t)` (within 0..t-1) of its sorted, weight-expanded sample; and every set's
    total weight. Labels < 0 are ignored; values must be finite. `value_max` (an upper bound
    of the values, for sizing the bins) saves a pass when given."""
    if n <= 0:
        return {}, {s: 0 for s in sets}
    if value_max is None:
        value_max = FLOOR
        for i in range(0, n, BLOCK):
            v, lab, _ = block(i, min(i + BLOCK, n))
            sel = v[lab >= 0]
            if sel.size:
                if not np.isfinite(sel).all():
                    raise ValueError("grouped percentiles need finite values")
                value_max = max(value_max, float(sel.max()))
    kmin, kmax = _key_range(value_max)
    nb = kmax - kmin + 1
    # row 0 of the histogram takes the left-out values (label -1): no compaction per block
    size = (n_labels + 1) * nb
    hist = np.zeros(size, dtype=np.int64)
    for i in range(0, n, BLOCK):
        v, lab, w = block(i, min(i + BLOCK, n))
        comb = _keys(v, kmin, kmax)
        comb += (lab.astype(np.int64) + 1) * nb
        hist += np.bincount(comb, minlength=size)
        heavy = w > 1  # weight k counts k times: add the k - 1 extra on the few heavy ones
        if heavy.any():
            hist += np.bincount(comb[heavy], weights=w[heavy] - 1, minlength=size).astype(np.int64)
    hist = hist[nb:]
    hist2 = hist.reshape(n_labels, nb)
    wanted = np.zeros((n_labels, nb), dtype=bool)
    located: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    totals: dict[str, int] = {}
    for name, labels in sets.items():
        h = hist2[list(labels)].sum(axis=0)
        cum = np.cumsum(h)
        totals[name] = int(cum[-1]) if cum.size else 0
        if totals[name] == 0:
            continue
        r = np.asarray(ranks(name, totals[name]), dtype=np.int64)
        uniq, inverse = np.unique(r, return_inverse=True)
        bins = np.searchsorted(cum, uniq, side="right")
        before = np.where(bins > 0, cum[np.maximum(bins - 1, 0)], 0)
        wanted[np.ix_(np.asarray(labels, dtype=np.int64), np.unique(bins))] = True
        located[name] = (uniq, inverse, bins, before)
    wanted_flat = np.r_[np.zeros(nb, dtype=bool), wanted.ravel()]  # row 0: left out
    cand_v, cand_lab, cand_w = [], [], []
    for i in range(0, n, BLOCK):
        v, lab, w = block(i, min(i + BLOCK, n))
        comb = _keys(v, kmin, kmax)
        comb += (lab.astype(np.int64) + 1) * nb
        keep = wanted_flat[comb]
        cand_v.append(v[keep])
        cand_lab.append(lab[keep])
        cand_w.append(w[keep])
    cv, cl, cw = np.concatenate(cand_v), np.concatenate(cand_lab), np.concatenate(cand_w)
    order = np.argsort(cv, kind="stable")  # sort the candidates once, for every set
    cv, cl, cw = cv[order], cl[order], cw[order]
    out: dict[str, np.ndarray] = {}
    for name, labels in sets.items():
        if name not in located:
            continue
        uniq, inverse, bins, before = located[name]
        mine = np.isin(cl, np.asarray(list(labels)))
        v, w = cv[mine], cw[mine].astype(np.int64)  # still sorted: a subset of sorted values
        b = _keys(v.copy(), kmin, kmax)
        cumw = np.cumsum(w)
        seg_start = np.searchsorted(b, bins, side="left")
        base = np.where(seg_start > 0, cumw[np.maximum(seg_start - 1, 0)], 0)
        pos = np.searchsorted(cumw, base + (uniq - before), side="right")
        out[name] = v[pos][inverse]
    return out, totals


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
    value_max: float | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]]:
    """Per set: (value, lower, upper, n) at the percentiles `grid` (linear interpolation; bands
    by the exact order-statistic bootstrap of analysis.percentiles). Three passes over the data:
    value range, weighted histograms per label, candidates in the wanted bins."""
    from analysis import percentiles as pc

    g = np.asarray(grid, dtype=np.float64)
    shapes: dict[str, tuple[int, ...]] = {}

    def ranks(name: str, total: int) -> np.ndarray:
        lo, hi, _ = pc._linear_ranks(total, g)
        idx = pc.bootstrap_ranks(total, g, resamples, seed)
        shapes[name] = idx.shape
        return np.concatenate([lo, hi, idx.ravel()])

    stats, totals = grouped_order_statistics(n, block, n_labels, sets, ranks, value_max=value_max)
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
    for name in sets:
        if name not in stats:
            nan = np.full(g.shape, np.nan)
            out[name] = (nan, nan.copy(), nan.copy(), 0)
            continue
        total, st = totals[name], stats[name]
        _, _, t = pc._linear_ranks(total, g)
        value = pc._lerp(st[: g.size], st[g.size : 2 * g.size], t)
        if resamples > 0:
            lower, upper = pc._band(st[2 * g.size :].reshape(shapes[name]), confidence)
        else:
            lower, upper = np.full(g.shape, np.nan), np.full(g.shape, np.nan)
        out[name] = (value, lower, upper, total)
    return out
