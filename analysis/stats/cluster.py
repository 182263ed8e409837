"""Cluster bootstrap of percentiles: the unit resampled is the cluster (a request), carrying all
its samples (its tokens' ITL), so the replicates see the correlation inside a request.

Unit: one cluster per request. A replicate draws J clusters with replacement out of the J that
have samples (multinomial counts w_j, sum J) and takes numpy's linear percentile of the pooled
samples, each sample of cluster j counted w_j times (exactly what concatenating the drawn
requests' tokens and calling np.percentile gives, without building that array).

Guarantee: the bootstrap distribution is that of the statistic under sampling of independent
requests, whatever the dependence between the tokens of one request (Davison & Hinkley 1997,
sec. 3.8; Field & Welsh 2007): its spread estimates the percentile's standard error with the
request as the independent unit, so with J requests it is no narrower than J independent units
allow, however many tokens they carry. Consistency needs many clusters (J -> infinity); with
few requests the standard error is itself noisy, which a caller must refuse or state.
With one sample per cluster it is the ordinary (iid) bootstrap.

Test: tests/analysis/test_compare_calibration.py (each replicate equals np.percentile of the
concatenated drawn requests; the standard error of p50 ITL matches its spread over independent
synthetic runs, where the token-level bootstrap's is several times too small).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from analysis.stats.ranks import lerp, linear_ranks


def cluster_percentile_draws(
    values: npt.ArrayLike,
    clusters: npt.ArrayLike,
    q: npt.ArrayLike,
    *,
    resamples: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """Replicates, shape (resamples, len(q)), of the linear percentiles `q` (0..100) of `values`
    under resampling of whole clusters (`clusters`: one label per value, any integers). Values
    must be finite; an empty input gives NaN."""
    v = np.asarray(values, dtype=np.float64)
    labels = np.asarray(clusters)
    qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if v.shape != labels.shape:
        raise ValueError("values and clusters differ in length")
    if v.size == 0 or resamples <= 0:
        return np.full((max(resamples, 0), qs.size), np.nan)
    order = np.argsort(v, kind="stable")
    _, codes = np.unique(labels[order], return_inverse=True)
    n = int(codes.max()) + 1
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)  # (resamples, J)
    return replicates(v[order], codes.astype(np.int64), weights, qs)


def replicates(
    sorted_values: np.ndarray, codes: np.ndarray, weights: np.ndarray, q: np.ndarray
) -> np.ndarray:
    """For each row of `weights` (counts per cluster), np.percentile (linear) at `q` of the
    sample holding `sorted_values[k]` (ascending) weights[codes[k]] times, exactly.

    The sorted values are cut into G blocks; one product of the counts with the per-cluster
    block counts (B x J by J x G, integers exact in float64) gives every replicate's weighted
    count below each block, and only the block holding a wanted rank is scanned."""
    t = sorted_values.size
    j = int(weights.shape[1])
    g = int(min(t, max(16, 4 * np.sqrt(t))))
    edges = np.linspace(0, t, g + 1).astype(np.int64)
    block = np.repeat(np.arange(g), np.diff(edges))
    per = np.bincount(codes * g + block, minlength=j * g).reshape(j, g).astype(np.float64)
    wf = weights.astype(np.float64)
    cum_blocks = np.cumsum(wf @ per, axis=1)  # (B, G): weighted count up to each block's end
    nb = weights.shape[0]
    totals = np.rint(cum_blocks[:, -1]).astype(np.int64)
    # linear_ranks broadcasts: one row of ranks per replicate, each (B, len(q))
    lo, hi, frac = linear_ranks(totals[:, None], q[None, :])  # type: ignore[arg-type]
    ranks = np.concatenate([lo, hi], axis=1)  # (B, 2 len(q)) 0-based ranks wanted
    # the block holding each rank: one searchsorted over the rows laid end to end
    span = float(totals.max() + 1)
    offs = np.arange(nb, dtype=np.float64)[:, None] * span
    flat = np.searchsorted((cum_blocks + offs).ravel(), (ranks + offs).ravel(), side="right")
    blk = flat.reshape(ranks.shape) - np.arange(nb)[:, None] * g
    before = np.where(blk > 0, np.take_along_axis(cum_blocks, np.maximum(blk - 1, 0), 1), 0.0)
    # scan inside the block: the weighted counts of its (at most `width`) values in order
    width = int(np.diff(edges).max())
    start = edges[blk]
    pos = start[..., None] + np.arange(width)  # (B, 2 len(q), width)
    inside = pos < edges[blk + 1][..., None]
    pos = np.minimum(pos, t - 1)
    w_at = np.take_along_axis(wf[:, None, :], codes[pos].reshape(nb, -1)[:, None, :], 2)
    w_at = w_at.reshape(pos.shape) * inside
    cum_in = before[..., None] + np.cumsum(w_at, axis=2)
    k = (cum_in <= ranks[..., None]).sum(axis=2)  # values in the block at or below the rank
    vals = sorted_values[np.minimum(start + k, t - 1)]
    n_q = q.size
    return lerp(vals[:, :n_q], vals[:, n_q:], frac)


def weighted_percentiles(
    sorted_values: np.ndarray, codes: np.ndarray, weights: np.ndarray, q: np.ndarray
) -> np.ndarray:
    """One replicate of `replicates` (counts `weights` per cluster) by the plain method: the
    cumulative weighted count at every sorted value. For tests of `replicates`."""
    cum = np.cumsum(weights[codes])
    lo, hi, t = linear_ranks(int(cum[-1]), q)
    a = sorted_values[np.searchsorted(cum, lo, side="right")]
    z = sorted_values[np.searchsorted(cum, hi, side="right")]
    return lerp(a, z, t)


def n_clusters(clusters: npt.ArrayLike) -> int:
    """The number of distinct clusters (the n a cluster-level statistic reports)."""
    return int(np.unique(np.asarray(clusters)).size)
