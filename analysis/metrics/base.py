"""The shared pieces of every metric: array types, the exact percentile, a column as floats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

PERCENTILE_METHOD: Final = "linear"  # numpy's default (type 7 of Hyndman & Fan)
NS_PER_MS = 1e6


def float_column(df: pd.DataFrame, name: str) -> FloatArray:
    return np.asarray(df[name].to_numpy(dtype=np.float64, na_value=np.nan))


def percentile(values: npt.ArrayLike, q: float | Sequence[float]) -> Any:
    """Exact percentile(s) `q` (0..100) of the finite `values`, numpy `method="linear"`.
    NaN when there are no finite values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.full(np.shape(q), np.nan) if np.ndim(q) else float("nan")
    return np.percentile(v, np.asarray(q, dtype=np.float64), method=PERCENTILE_METHOD)
