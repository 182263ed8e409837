"""Grouped weighted order statistics equal np.percentile of the expanded sample, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.stats import grouped
from analysis.stats import percentiles as pc


@pytest.mark.parametrize("kind", ["continuous", "integers"])
def test_equals_expanded_numpy(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(grouped, "BLOCK", 1000)
    rng = np.random.default_rng(9)
    n = 20_000
    v = rng.lognormal(2, 1, n) if kind == "continuous" else rng.integers(0, 50, n) / 4.0
    lab = rng.integers(-1, 5, n)
    w = rng.integers(1, 4, n)

    def block(i: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return v[i:j], lab[i:j], w[i:j]

    sets = {"a": [0, 1], "b": [2], "all": [0, 1, 2, 3, 4], "none": []}
    g = pc.tail_grid()
    out = grouped.spectra_from_blocks(n, block, 5, sets, g, resamples=300, seed=3)
    for name, labels in sets.items():
        sel = np.isin(lab, labels)
        expanded = np.repeat(v[sel], w[sel])
        value, lower, upper, total = out[name]
        assert total == expanded.size
        if total == 0:
            assert np.isnan(value).all()
            continue
        assert np.array_equal(value, np.percentile(expanded, g))
        lo, hi = pc.bootstrap_band(expanded, g, resamples=300, seed=3)
        assert np.array_equal(lower, lo) and np.array_equal(upper, hi)


@pytest.mark.parametrize("value_max", [None, 3.0])
def test_negatives_and_a_low_bound_stay_exact(value_max: float | None) -> None:
    # values outside the binned range share the end bins; sorting candidates keeps it exact
    rng = np.random.default_rng(1)
    v = np.r_[rng.normal(0, 5, 3000), 0.0, 1e-9, 1e9]
    lab = np.zeros(v.size, dtype=np.int64)
    w = np.ones(v.size, dtype=np.int64)

    def block(i: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return v[i:j], lab[i:j], w[i:j]

    g = pc.tail_grid()
    value, _, _, total = grouped.spectra_from_blocks(
        v.size, block, 1, {"x": [0]}, g, resamples=20, value_max=value_max
    )["x"]
    assert total == v.size and np.array_equal(value, np.percentile(v, g))


def test_pick_reads_true_values_binned_by_a_monotone_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # blocks give g/k (µs, integers per token) and pick gives the ms values: same results as
    # binning the ms values themselves, and as np.percentile of the expanded sample
    monkeypatch.setattr(grouped, "BLOCK", 997)
    rng = np.random.default_rng(4)
    n = 30_000
    gap = rng.integers(0, 90_000, n)
    k = rng.integers(1, 4, n)
    lab = rng.integers(-1, 3, n)

    def keys(i: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.true_divide(gap[i:j], k[i:j], dtype=np.float64), lab[i:j], k[i:j]

    def pick(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return gap[pos].astype(np.float64) / k[pos] / 1e3, lab[pos], k[pos]

    sets = {"all": [0, 1, 2], "one": [1]}
    g = pc.tail_grid()
    out = grouped.spectra_from_blocks(n, keys, 3, sets, g, value_max=90_000.0, pick=pick)
    for name, labels in sets.items():
        sel = np.isin(lab, labels)
        expanded = np.repeat(gap[sel].astype(np.float64) / k[sel] / 1e3, k[sel])
        value, lower, upper, total = out[name]
        assert total == expanded.size
        assert np.array_equal(value, np.percentile(expanded, g))
        lo, hi = pc.bootstrap_band(expanded, g)
        assert np.array_equal(lower, lo) and np.array_equal(upper, hi)
