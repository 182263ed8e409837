"""The binomial and beta distribution functions the verdicts need (loadgen.results.binomial,
loadgen.results.clustered, analysis.verdicts.sla), equal bit for bit to what scipy.stats
returns: its `binom` and `beta` evaluate these same special functions (Boost's). Taken from
scipy.special directly because importing scipy.stats costs about a CPU-second per process,
paid by every `peakload run` that judges its run and every report (tests/loadgen/
test_distributions.py checks the equality over a grid, so a SciPy that changes either shows)."""

from __future__ import annotations

import math

from scipy import special
from scipy.special import _ufuncs  # scipy.stats.binom's own cdf and sf


def binom_cdf(k: float, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p) (scipy.stats.binom.cdf)."""
    k = math.floor(k)
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return float(_ufuncs._binom_cdf(k, n, p))


def binom_sf(k: float, n: int, p: float) -> float:
    """P(X > k) for X ~ Binomial(n, p) (scipy.stats.binom.sf)."""
    k = math.floor(k)
    if k < 0:
        return 1.0
    if k >= n:
        return 0.0
    return float(_ufuncs._binom_sf(k, n, p))


def beta_ppf(q: float, a: float, b: float) -> float:
    """The q-quantile of Beta(a, b) (scipy.stats.beta.ppf)."""
    return float(special.betaincinv(a, b, q))


def beta_cdf(x: float, a: float, b: float) -> float:
    """P(Y <= x) for Y ~ Beta(a, b) (scipy.stats.beta.cdf)."""
    return float(special.betainc(a, b, x))


def beta_sf(x: float, a: float, b: float) -> float:
    """P(Y > x) for Y ~ Beta(a, b) (scipy.stats.beta.sf)."""
    return float(special.betaincc(a, b, x))
