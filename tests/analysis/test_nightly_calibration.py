"""nightly's family-wise error control, measured: histories without a change (iid Gaussian
per-run values) show a change point, hence can show a regression, at most alpha of the time
(binomial margin), where BIC's penalty alone shows one far more often; a real step is still
found."""

from __future__ import annotations

import numpy as np
from scipy import stats

from analysis.verdicts import nightly
from tests.support.compare_calibration import binomial_lower


def test_no_change_histories_show_a_change_point_at_most_alpha() -> None:
    rng = np.random.default_rng(21)
    n, draws = 30, 400
    found = bic = 0
    for _ in range(draws):
        x = 100.0 + rng.standard_normal(n)
        found += bool(nightly.change_points(x, confidence=0.95))
        sigma = nightly.noise_sigma(x)
        bic += bool(nightly.change_points(x, penalty=2.0 * sigma**2 * np.log(n)))
    assert found <= stats.binom.ppf(0.99, draws, 0.05), f"{found}/{draws}"
    assert binomial_lower(bic, draws) > 0.05, f"BIC alone: {bic}/{draws}"


def test_a_step_of_four_sigma_is_still_found() -> None:
    rng = np.random.default_rng(3)
    hits = 0
    for _ in range(100):
        x = np.r_[rng.standard_normal(15), 4.0 + rng.standard_normal(15)]
        hits += any(abs(c - 15) <= 1 for c in nightly.change_points(x))
    assert hits >= 95, hits
