"""The penalty that holds a change-point search's family-wise error rate: the (1 - alpha) quantile
of the best split's gain, in units of the estimated noise variance, over series with no change.

Binary segmentation (analysis.verdicts.nightly.change_points) finds a change point at all only if
the best single split of the whole series gains more than the penalty. Under no change (iid
Gaussian noise of unknown sigma, estimated by the caller's own `sigma_fn`), the chance that any
change point is found is therefore P(max_k gain_k / sigma_hat^2 > c); with c this quantile it is
alpha, whatever the number of split positions searched (the family: every position at once).
The quantile is found by simulation (seeded, `DRAWS` series), cached per (n, min_size, alpha).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import numpy.typing as npt

DRAWS = 4000
SigmaFn = Callable[[npt.ArrayLike], float]


def best_split_gains(x: np.ndarray, min_size: int) -> np.ndarray:
    """Per row of x (draws, n): the largest drop in squared deviations from one split into two
    segments of at least `min_size` values, max_k k(n-k)/n (mean_left - mean_right)^2."""
    n = x.shape[1]
    c = np.cumsum(x, axis=1)
    k = np.arange(min_size, n - min_size + 1)
    left = c[:, k - 1] / k
    right = (c[:, -1:] - c[:, k - 1]) / (n - k)
    return np.asarray(np.max(k * (n - k) / n * (left - right) ** 2, axis=1), dtype=np.float64)


@lru_cache(maxsize=256)
def _quantile(n: int, min_size: int, alpha: float, sigma_fn: SigmaFn, seed: int) -> float:
    x = np.random.default_rng(seed).standard_normal((DRAWS, n))
    gains = best_split_gains(x, min_size)
    sig2 = np.array([sigma_fn(row) ** 2 for row in x])
    return float(np.quantile(gains / np.maximum(sig2, 1e-300), 1.0 - alpha))


def familywise_penalty_factor(
    n: int, min_size: int, alpha: float, sigma_fn: SigmaFn, seed: int = 0
) -> float:
    """c such that a penalty of c * sigma_hat^2 finds a change point in a series of n values
    without one with probability alpha (module docstring); 0 when no split is possible."""
    if n < 2 * min_size or not 0 < alpha < 1:
        return 0.0
    return _quantile(n, min_size, round(alpha, 12), sigma_fn, seed)


def family_statement(used: int, min_size: int, confidence: float) -> dict[str, object]:
    """What a report says of this error control for a history of `used` values."""
    return {
        "correction": "family-wise penalty (simulated null of the best split)",
        "family_size": max(used - 2 * min_size + 1, 0),
        "family": "every split position of the history, one metric and percentile",
        "familywise_error_rate": round(1.0 - confidence, 12),
        "run_to_run_variation": "counted: the series is of per-run values",
    }
