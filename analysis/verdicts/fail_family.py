"""The fail side of a run's verdict as one family: a run is failed only when a criterion's
fail-side p-value survives Holm's step-down adjustment over every statistical test of the
verdict (each claim at each load it is judged at, and the error budget).

Why: each test fails its claim at most 1 - C of the time when the claim holds (at its
boundary), so a verdict of 5 claims at 3 loads, each at 99 %, could fail a server meeting every
one of them up to 15 % of the time. Under Holm the chance that a run whose every claim holds is
failed stays at most 1 - C, whatever the number of tests and their dependence (the claims of a
run share its requests). The pass side needs no correction: a run passes only when every test
passes at its own confidence (an intersection-union test), so a false claim is passed at most
1 - C of the time however many others there are.

Tests with their own confidence (a claims file's per-claim `confidence`) enter weighted, each
compared with its own alpha (loadgen.results.multiple.holm_own_alpha): the family-wise rate is
then at most the mean alpha of the true claims. A criterion that is not a test (the load
delivered) and a budget turned off (`max_error_rate = 1`) carry no p-value and are not counted.
The saturation search decides each level by the same rule (loadgen/engine/search.py).

A fail that does not survive becomes "insufficient samples": the data disprove the claim at
its own confidence, but not at the family's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from analysis.verdicts import sla
from loadgen.results.multiple import holm_own_alpha


def family(verdicts: Sequence[sla.ClaimVerdict]) -> list[int]:
    """The indices of the verdicts that are fail-side tests (a finite p_fail)."""
    return [i for i, v in enumerate(verdicts) if math.isfinite(v.p_fail)]


def adjust_fails(verdicts: Sequence[sla.ClaimVerdict]) -> list[sla.ClaimVerdict]:
    """`verdicts` with each test's Holm-adjusted fail p-value (`p_fail_adjusted`, on its own
    alpha's scale) and the family's size set, and a fail that does not survive turned into
    "insufficient samples"."""
    idx = family(verdicts)
    out = list(verdicts)
    if not idx:
        return out
    alphas = np.array([1.0 - verdicts[i].confidence for i in idx])
    adjusted = holm_own_alpha([verdicts[i].p_fail for i in idx], alphas)
    for i, alpha, p_adj in zip(idx, alphas, adjusted, strict=True):
        v = verdicts[i]
        held = v.verdict == "fail" and not p_adj <= alpha
        out[i] = replace(
            v,
            verdict="insufficient samples" if held else v.verdict,
            p_fail_adjusted=float(p_adj),
            family=len(idx),
            fail_held=held,
        )
    return out
