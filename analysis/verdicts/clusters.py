"""The per-request counts a token-level SLA claim is judged on (loadgen/results/clustered.py): for
each selected request its per-token samples and how many reach the threshold, so the request, not
the token, is the unit (issue #21)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from analysis import metrics as m
from loadgen.engine.samples import TOKEN_METRICS as TOKEN_METRICS


def request_counts(
    chunks: m.ChunkArrays, rows: m.BoolArray, threshold: float, failed: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], m.FloatArray]:
    """(m_i, k_i) per request of `rows` with at least one per-token ITL sample (the samples and
    those >= `threshold`), then one (1, 1) per `failed` request (a miss counts as one exceeding
    sample, as it does for a per-request metric), and every sample (ms), pooled."""
    values, labels = m.per_token_values(m.chunk_gaps(chunks, rows))
    fin = np.isfinite(values)
    values, labels = values[fin], labels[fin]
    size = chunks.n_requests
    counts = np.bincount(labels, minlength=size).astype(np.float64)
    hits = np.bincount(labels, weights=(values >= threshold), minlength=size)
    has = counts > 0
    ones = np.ones(failed)
    return np.r_[counts[has], ones], np.r_[hits[has], ones], values
