"""The rule for SLA claims on a token-level metric (per-token ITL: many samples per request),
shared by `peakload sla` (analysis/verdicts/sla.py) and the saturation search
(loadgen/engine/search.py): a pure function of each request's sample count and exceedances, with no
data access.

Unit of replication: the request. Gaps within one stream share a slot, a batch and a network
path, so they are correlated; requests are the independent units. The quantity claimed is the
pooled exceedance fraction theta = E[k_i] / E[m_i] (request i has m_i samples, k_i of them >= the
threshold; a failed request counts as one sample, exceeding), i.e. "p`P` of all tokens < T" with
allowed fraction e0 = 1 - P/100.

The test (exact on clusters: Clopper-Pearson on the worst-case effective sample): the ratio
estimate p = sum k_i / sum m_i, and n* = (sum m_i)^2 / sum m_i^2 (Kish's effective sample size
of a mean weighted by m_i: n when every request has as many samples); then the one-sided
Clopper-Pearson bounds at C on x = p n* exceedances in n* trials (beta quantiles, non-integer
counts allowed): pass if the upper bound < e0 (equivalently P(Bin(n*, e0) <= x) <= 1 - C), fail
if the lower bound > e0, else "insufficient samples". n* is what the samples are worth when the
correlation within a request is perfect (every request's samples all exceed or none): then, with
equal m_i, x is exactly Binomial(n, theta) and the test is the exact binomial test on requests;
a weaker correlation only makes p less variable (each request's share k_i/m_i is in [0, 1]
with the same mean, less spread than a Bernoulli's), so the test is conservative. No estimate
of the correlation enters: a lucky sample with few exceeding requests cannot shrink the bound
(an estimated design effect, Korn-Graubard style, passed 3-4 % of boundary runs at alpha = 1 %
in our simulation; the per-token binomial rule about 40 %; see bench/RESULTS.md).

The minimum number of requests: under perfect within-request correlation a run of n requests is
n Bernoulli trials, and with none exceeding P(pass | theta = e0) = (1 - e0)^n; no rule valid for
every within-request correlation can pass with (1 - e0)^n > 1 - C. So a claim passes only from
at least `min_requests` requests (loadgen.results.binomial's count for the same claim on a
per-request metric: 459 for p99 at 99 %, 44 for p90), however many tokens, and n* <= n enforces it.

Guarantee: false-pass rate at most 1 - C at the boundary theta = e0 for any within-request
correlation (exact for all-or-nothing requests of equal length, conservative otherwise);
measured by tests/analysis/test_sla_calibration.py and bench/calibration_sla.py on synthetic
runs with per-request random effects, AR(1) gaps and stalls clustered in a few requests
(tests/support/correlated_runs.py). The price is power: a token-level claim needs about as many
requests as the same claim on a per-request metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.results.binomial import Verdict, decide

RULE = "requests as the unit: Clopper-Pearson on the worst-case effective sample"


@dataclass(frozen=True, slots=True)
class ClusteredDecision:
    """The verdict and what it rests on: `requests` (the unit, the n reported), `tokens` (sum of
    m_i) and `exceedances` (sum of k_i), the estimate, its one-sided bounds at the confidence,
    the effective sample size, the p-values of the pass and fail tests on the effective sample
    (the Clopper-Pearson tail probabilities at e0), and the minimum number of requests."""

    verdict: Verdict
    requests: int
    tokens: int
    exceedances: int
    estimate: float
    lower: float
    upper: float
    effective_n: float
    p_pass: float
    p_fail: float
    min_requests: int


def min_requests(percentile: float, confidence: float) -> int:
    """The fewest requests from which a token-level "p`percentile` < T" claim can pass at
    `confidence` (module docstring): the smallest n with (1 - e0)^n <= 1 - confidence."""
    allowed = 1.0 - percentile / 100.0
    alpha = 1.0 - confidence
    n = max(1, math.ceil(math.log(alpha) / math.log1p(-allowed)) - 1)
    while decide(n, 0, percentile, confidence) != "pass":
        n += 1
    return n


def decide_clustered(
    samples: npt.ArrayLike, exceedances: npt.ArrayLike, percentile: float, confidence: float
) -> ClusteredDecision:
    """The verdict on "p`percentile` of the pooled samples < threshold" from each request's
    sample count m_i (`samples`) and exceedances k_i (module docstring)."""
    from loadgen.results.distributions import beta_cdf, beta_ppf, beta_sf  # as in binomial

    m = np.asarray(samples, dtype=np.float64)
    k = np.asarray(exceedances, dtype=np.float64)
    keep = m > 0
    m, k = m[keep], k[keep]
    n = int(m.size)
    total, hits = float(m.sum()), float(k.sum())
    e0 = 1.0 - percentile / 100.0
    alpha = 1.0 - confidence
    need = min_requests(percentile, confidence)
    if n == 0:
        return ClusteredDecision(
            "insufficient samples", 0, 0, 0, math.nan, 0.0, 1.0, 0.0, 1.0, 1.0, need
        )
    p = hits / total
    n_eff = total**2 / float((m * m).sum())
    x = p * n_eff
    upper = 1.0 if x >= n_eff else beta_ppf(confidence, x + 1.0, n_eff - x)
    lower = 0.0 if x <= 0.0 else beta_ppf(alpha, x, n_eff - x + 1.0)
    # Clopper-Pearson tails at e0 on the effective sample: P(Bin(n*, e0) <= x) = I_{1-e0}(n*-x, x+1)
    p_pass = 1.0 if x >= n_eff else beta_sf(e0, x + 1.0, n_eff - x)
    p_fail = 1.0 if x <= 0.0 else beta_cdf(e0, x, n_eff - x + 1.0)
    verdict: Verdict = "insufficient samples"
    if p_fail <= alpha and lower > e0:
        verdict = "fail"
    elif p_pass <= alpha and upper < e0 and n >= need:
        verdict = "pass"
    return ClusteredDecision(
        verdict, n, int(total), int(hits), p, lower, upper, n_eff, p_pass, p_fail, need
    )
