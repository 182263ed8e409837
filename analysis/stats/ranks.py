"""Rank and band maths shared by the percentile code (analysis.stats.percentiles,
analysis.stats.grouped, analysis.stats.itl_spectra), with no imports from analysis: which 0-based
order statistics a linear percentile or a bootstrap band needs, how the percentile is interpolated
from them, and the monotone integer key (a float64's top bits) the O(n) selections bin values by.

Percentiles are numpy's `method="linear"`: rank h = (n - 1)·q/100, value = x[⌊h⌋] +
(x[⌊h⌋+1] - x[⌊h⌋])·(h - ⌊h⌋), by numpy's own interpolation formula (`lerp`), so the numbers
are np.percentile's exactly. Bands: see analysis.stats.percentiles.bootstrap_band.
"""

from __future__ import annotations

import numpy as np
from scipy import special

KEY_SHIFT = 40
"""A float64's bits shifted right by this keep its sign, exponent and top 12 mantissa bits:
a key monotone in the value for values >= 0 (4,096 keys an octave)."""


def float_key(x: float) -> int:
    """The `KEY_SHIFT` key of one float (see `KEY_SHIFT`)."""
    return int(np.array([float(x)]).view(np.int64)[0] >> KEY_SHIFT)


def linear_ranks(n: int, qs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For percentiles `qs` (0..100) of n sorted values: the 0-based ranks below and above each
    (lo, hi = min(lo + 1, n - 1)) and the interpolation weight t = h - lo, h = (n - 1)·q/100."""
    h = (n - 1) * (qs / 100.0)
    lo = np.floor(h).astype(np.int64)
    return lo, np.minimum(lo + 1, n - 1), h - lo


def lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """a + (b - a)·t, by numpy's own formula (numpy/lib/_function_base_impl.py `_lerp`: from b
    for t >= 0.5), so results equal np.percentile's exactly."""
    diff = b - a
    out = a + diff * t
    return np.asarray(np.where(t >= 0.5, b - diff * (1 - t), out), dtype=np.float64)


def bootstrap_ranks(n: int, qs: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """0-based ranks, shape (resamples, len(qs)), of Monte Carlo bootstrap replicates' quantiles:
    ceil(n·U) - 1 with U ~ Beta(r, n + 1 - r), r = 1 + (n - 1)·q/100 (seeded)."""
    rng = np.random.default_rng(seed)
    r = 1.0 + (n - 1) * qs / 100.0
    u = rng.beta(r, n + 1.0 - r, size=(resamples, qs.size))
    return np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)


def band_ranks(n: int, qs: np.ndarray, confidence: float) -> np.ndarray:
    """0-based ranks, shape (2, len(qs)), of the lower and upper ends of the exact bootstrap band:
    ceil(n·B⁻¹(a)) - 1 for a = (1 - confidence)/2 and 1 - that, B⁻¹ the Beta(r, n + 1 - r)
    quantile function, r = 1 + (n - 1)·q/100."""
    alpha = (1.0 - confidence) / 2.0
    r = 1.0 + (n - 1) * qs / 100.0
    ends = np.array([[alpha], [1.0 - alpha]])
    u = np.asarray(special.betaincinv(r[None, :], n + 1.0 - r[None, :], ends), dtype=np.float64)
    return np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)


def band_sample_ranks(
    n: int, qs: np.ndarray, confidence: float, resamples: int, exact: bool, seed: int
) -> np.ndarray:
    """The ranks a band needs: `band_ranks` (2, len(qs)) when `exact`, else `bootstrap_ranks`
    (resamples, len(qs))."""
    return band_ranks(n, qs, confidence) if exact else bootstrap_ranks(n, qs, resamples, seed)


def band_from(
    stats: np.ndarray, shape: tuple[int, ...], confidence: float, exact: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) from the order statistics at `band_sample_ranks`' ranks (flattened, of
    that `shape`): the two rows when `exact`, else the band's quantiles of the replicates."""
    s = stats.reshape(shape)
    if exact:
        return s[0].copy(), s[1].copy()
    alpha = (1.0 - confidence) / 2.0
    return np.quantile(s, alpha, axis=0), np.quantile(s, 1.0 - alpha, axis=0)
