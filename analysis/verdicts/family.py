"""The family of tests a comparison judges and its error control: every row of a comparison
(latency metric x percentile x level pair, both throughputs and the error rate per level pair)
is one one-sided test, and regressions are decided by Holm's step-down procedure over all of
them (loadgen.results.multiple), so the chance that identical servers show any regression is at
most 1 - confidence however many metrics, percentiles and levels are compared.

Why Holm, not a declared primary set: a vendor or CI job may care about any metric at any
load (a p99 ITL regression at one level is as real as a p50 TTFT one); Holm controls the
family-wise rate in the strong sense under any dependence between the tests (the rows of one
run are strongly dependent) and gives up least power among the procedures valid under
arbitrary dependence. Improvements are adjusted the same way, separately.

A declared primary set (`primary`: (metric, percentile) pairs, percentile None for throughput
and the error rate; `compare --primary`) is the other way the issue allows: Holm runs over the
primary rows alone, so they keep more power (a single primary test keeps all of alpha), and
every other row is reported as a `change` (Holm over the rest, for reading), never a
regression. Use it when the decision is about a few named numbers.

Each row carries `p_worse`/`p_better` (one-sided, unadjusted, None when no test could be made)
and `beyond_worse`/`beyond_better` (the change exceeds the practical threshold); `decide` adds
p_adjusted, regression, improvement, correction and family_size.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping, Sequence
from typing import Any

import numpy as np

from loadgen.results.multiple import CORRECTION, family_size, holm


def _p(rows: Sequence[MutableMapping[str, Any]], key: str) -> np.ndarray:
    return np.array(
        [math.nan if r.get(key) is None else float(r[key]) for r in rows], dtype=np.float64
    )


Primary = frozenset[tuple[str, float | None]]


def is_primary(row: MutableMapping[str, Any], primary: Primary | None) -> bool:
    """Whether a row is in the family that decides (every row when no primary set)."""
    if primary is None:
        return True
    pct = row.get("percentile")
    key = None if pct is None or pct != pct else float(pct)
    return (str(row.get("metric")), key) in primary


def decide(
    rows: Sequence[MutableMapping[str, Any]], confidence: float, primary: Primary | None = None
) -> None:
    """Set each row's regression/improvement (and `change`, `role`) from the Holm-adjusted
    p-values of its family (in place): all rows, or the primary rows and the rest apart."""
    alpha = 1.0 - confidence
    groups = [[r for r in rows if is_primary(r, primary)]]
    if primary is not None:
        groups.append([r for r in rows if not is_primary(r, primary)])
    for g, part in enumerate(groups):
        pw, pb = _p(part, "p_worse"), _p(part, "p_better")
        aw, ab = holm(pw), holm(pb)
        size = family_size(pw)
        for r, w, b in zip(part, aw, ab, strict=True):
            sig_w = bool(r.get("beyond_worse")) and math.isfinite(w) and w < alpha
            sig_b = bool(r.get("beyond_better")) and math.isfinite(b) and b < alpha
            r["p_adjusted"] = float(w) if math.isfinite(w) else None
            r["role"] = (
                "primary" if g == 0 and primary is not None else "family" if g == 0 else "secondary"
            )
            r["regression"] = sig_w and g == 0
            r["improvement"] = sig_b and g == 0
            r["change"] = "worse" if sig_w else "better" if sig_b else None
            r["correction"] = CORRECTION
            r["family_size"] = size


def describe(
    rows: Sequence[MutableMapping[str, Any]], confidence: float, primary: Primary | None = None
) -> dict[str, Any]:
    """The family a report states: correction, size (tests made), the family-wise rate held."""
    deciding = [r for r in rows if is_primary(r, primary)]
    out = {
        "correction": CORRECTION,
        "family_size": family_size(_p(deciding, "p_worse")),
        "rows": len(rows),
        "familywise_error_rate": round(1.0 - confidence, 12),
        "family": "latency metrics x percentiles x level pairs, request and output-token "
        "throughput and error rate per level pair",
        "primary": None,
    }
    if primary is not None:
        out["family"] = "the declared primary set, per level pair; the other rows are changes"
        out["primary"] = sorted(f"{m}:p{p:g}" if p is not None else m for m, p in primary)
    return out
