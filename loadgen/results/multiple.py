"""Family-wise error control over many tests: Holm's step-down adjustment of p-values.

Holm (1979): sort the m p-values, p(1) <= ... <= p(m); the adjusted value of p(i) is
max over j <= i of min(1, (m - j + 1)·p(j)). Rejecting every test whose adjusted p-value is below
alpha holds the family-wise error rate (the chance of at least one false rejection) at alpha
under any dependence between the tests, and rejects at least what Bonferroni rejects.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

CORRECTION = "Holm"


def holm(pvalues: npt.ArrayLike) -> np.ndarray:
    """Holm-adjusted p-values in the input order. A NaN (a test that could not be made) is left
    NaN and not counted in the family size: it can never reject."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def family_size(pvalues: npt.ArrayLike) -> int:
    """The number of tests Holm counts (finite p-values)."""
    return int(np.isfinite(np.asarray(pvalues, dtype=np.float64)).sum())


def holm_own_alpha(pvalues: npt.ArrayLike, alphas: npt.ArrayLike) -> np.ndarray:
    """Holm with each test compared with its own alpha (a weighted Holm): the p-values are
    scaled by the smallest alpha over their own, adjusted, and scaled back, so a test is
    rejected when its adjusted value is at most its own alpha; the family-wise error rate is at
    most the mean alpha of the true hypotheses (their common alpha when all are equal, plain
    Holm). NaN: no test, not counted."""
    p = np.asarray(pvalues, dtype=np.float64)
    a = np.asarray(alphas, dtype=np.float64)
    if p.size == 0:
        return p.copy()
    ref = float(a.min())
    return holm(p * ref / a) * a / ref
