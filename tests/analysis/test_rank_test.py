"""analysis.stats.rank_test against scipy's mannwhitneyu: the same one-sided p-values in both
directions, with ties, shifts, identical samples, small samples (scipy's exact branch) and NaN."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from analysis.stats.rank_test import mann_whitney_p


def _scipy(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    return (
        float(stats.mannwhitneyu(x, y, alternative="greater").pvalue),
        float(stats.mannwhitneyu(x, y, alternative="less").pvalue),
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_p_values_are_scipy_s(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n1, n2 = (int(v) for v in rng.integers(2, 3000, size=2))
    shift = float(rng.choice([0.0, 0.01, 0.05, 0.3]))
    x = rng.lognormal(0.0 + shift, 0.5, n1)
    y = rng.lognormal(0.0, 0.5, n2)
    if seed % 3 == 0:  # latencies stored to 0.1 ms: many ties
        x, y = np.round(x * 10) / 10, np.round(y * 10) / 10
    got = mann_whitney_p(x, y)
    np.testing.assert_allclose(got, _scipy(x, y), rtol=1e-9, atol=1e-15)
    assert mann_whitney_p(np.sort(x), np.sort(y), presorted=True) == got


def test_values_tied_within_and_across_the_samples() -> None:
    """Tie groups held by one sample only, by both, and a value shared by every y: the tie
    correction built from the two samples' runs equals scipy's over the pooled ranks."""
    x = np.array([1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 5.0, 7.0, 7.0, 9.0, 9.5])
    y = np.array([0.5, 1.0, 3.0, 3.0, 4.0, 7.0, 7.0, 7.0, 8.0, 9.5, 9.5, 10.0])
    np.testing.assert_allclose(mann_whitney_p(x, y), _scipy(x, y), rtol=1e-12)
    np.testing.assert_allclose(mann_whitney_p(y, x), _scipy(y, x), rtol=1e-12)
    z = np.full(12, 7.0)
    np.testing.assert_allclose(mann_whitney_p(x, z), _scipy(x, z), rtol=1e-12)


def test_identical_and_all_tied_samples() -> None:
    x = np.full(50, 3.0)
    assert mann_whitney_p(x, x.copy()) == _scipy(x, x.copy()) == (1.0, 1.0)
    rng = np.random.default_rng(1)
    y = rng.normal(size=200)
    np.testing.assert_allclose(mann_whitney_p(y, y.copy()), _scipy(y, y.copy()), rtol=1e-12)


def test_a_clear_shift_is_found_in_its_direction_only() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(3.0, 0.3, 5000)
    slower = rng.lognormal(3.1, 0.3, 5000)
    greater, less = mann_whitney_p(slower, base)
    assert greater < 1e-6 and less > 0.999999
    np.testing.assert_allclose((greater, less), _scipy(slower, base), rtol=1e-6, atol=1e-300)


def test_small_samples_and_nan_take_scipy_s_own_path() -> None:
    x, y = np.array([1.0, 2.0, 3.5]), np.array([0.5, 0.7, 1.5, 2.2])
    assert mann_whitney_p(x, y) == _scipy(x, y)
    with_nan = np.array([1.0, np.nan, *range(20)])
    got, want = mann_whitney_p(with_nan, y), _scipy(with_nan, y)
    assert np.isnan(got[0]) and np.isnan(want[0])
