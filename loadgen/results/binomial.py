"""The exact binomial rule every percentile verdict uses (`peakload sla`, the saturation search):
a pure function of the sample count, the exceedances and the claim, with no data access, so the
runner (which must not import analysis) and analysis/verdicts/sla.py share one definition.

For "p`P` of a metric < T" with allowed exceedance fraction e0 = 1 - P/100, n samples and k
exceedances (samples >= T), at confidence C: pass if P(Binomial(n, e0) <= k) <= 1 - C; fail if
P(Binomial(n, e0) >= k) <= 1 - C; else "insufficient samples" (never "pass"). See
analysis/verdicts/sla.py for the reasoning and the sample counts it implies.
"""

from __future__ import annotations

from typing import Literal

Verdict = Literal["pass", "fail", "insufficient samples"]


def pass_p_value(n: int, k: int, allowed: float) -> float:
    """P(Binomial(n, allowed) <= k): small means few exceedances are unlikely under the claim's
    boundary, evidence that the true exceedance fraction is below `allowed`."""
    # here, not at import: a shard without a search never needs scipy
    from loadgen.results.distributions import binom_cdf

    return binom_cdf(k, n, allowed) if n > 0 else 1.0


def fail_p_value(n: int, k: int, allowed: float) -> float:
    """P(Binomial(n, allowed) >= k): small means this many exceedances are unlikely if the
    true fraction were `allowed` (or less)."""
    # here, not at import: a shard without a search never needs scipy
    from loadgen.results.distributions import binom_sf

    return binom_sf(k - 1, n, allowed) if n > 0 else 1.0


def decide(n: int, k: int, percentile: float, confidence: float) -> Verdict:
    """The verdict on "p`percentile` < threshold" after k exceedances in n samples."""
    allowed = 1.0 - percentile / 100.0
    alpha = 1.0 - confidence
    if n > 0 and pass_p_value(n, k, allowed) <= alpha:
        return "pass"
    if n > 0 and fail_p_value(n, k, allowed) <= alpha:
        return "fail"
    return "insufficient samples"


def decide_error_budget(n: int, k: int, max_error_rate: float, confidence: float) -> Verdict:
    """The error budget's verdict: k of n steady requests failed, at most `max_error_rate` may
    (a claim on the failure fraction, decided like a percentile claim with e0 =
    max_error_rate): e0 >= 1 turns it off (pass), e0 <= 0 allows no failure (pass iff n > 0 and
    k = 0). The exit verdict (analysis/verdicts/verdict.py) and the saturation search use it."""
    if max_error_rate >= 1.0:
        return "pass"
    if max_error_rate <= 0.0:
        return "pass" if n > 0 and k == 0 else "fail" if k > 0 else "insufficient samples"
    return decide(n, k, 100.0 * (1.0 - max_error_rate), confidence)
