"""loadgen.results.distributions gives what scipy.stats gives, bit for bit, over the counts and
fractions the verdicts meet (the claims' boundaries, the search's levels, the clustered rule's
effective sizes), and its edges (k below 0, k at or above n) as scipy.stats has them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from loadgen.results import distributions as d

COUNTS = [*range(1, 40), 100, 459, 1_000, 5_000, 20_000, 100_000]
FRACTIONS = [0.0005, 0.001, 0.01, 0.05, 0.1, 0.5, 0.9, 0.999]
QUANTILES = [0.001, 0.01, 0.05, 0.5, 0.95, 0.99, 0.999]


def ks(n: int) -> list[int]:
    return sorted({-1, 0, 1, 2, n // 3, n // 2, n - 1, n, n + 1})


@pytest.mark.parametrize("n", COUNTS)
def test_binomial_cdf_and_sf_equal_scipy_stats(n: int) -> None:
    for k in ks(n):
        for p in FRACTIONS:
            assert d.binom_cdf(k, n, p) == float(stats.binom.cdf(k, n, p)), (k, n, p)
            assert d.binom_sf(k, n, p) == float(stats.binom.sf(k, n, p)), (k, n, p)


@pytest.mark.parametrize("n", COUNTS)
def test_clopper_pearson_quantiles_equal_scipy_stats(n: int) -> None:
    for k in ks(n):
        for q in QUANTILES:
            if 1 <= k <= n:
                assert d.beta_ppf(q, k, n - k + 1) == float(stats.beta.ppf(q, k, n - k + 1))
            if 0 <= k < n:
                assert d.beta_ppf(q, k + 1, n - k) == float(stats.beta.ppf(q, k + 1, n - k))


def test_beta_functions_equal_scipy_stats_at_fractional_sizes() -> None:
    """The clustered rule's effective sample sizes and counts are not integers."""
    rng = np.random.default_rng(7)
    for _ in range(2_000):
        a, b = rng.uniform(0.05, 400.0), rng.uniform(0.05, 20_000.0)
        x, q = rng.uniform(0.0, 1.0), rng.uniform(0.0005, 0.9995)
        assert d.beta_cdf(x, a, b) == float(stats.beta.cdf(x, a, b)), (x, a, b)
        assert d.beta_sf(x, a, b) == float(stats.beta.sf(x, a, b)), (x, a, b)
        assert d.beta_ppf(q, a, b) == float(stats.beta.ppf(q, a, b)), (q, a, b)
