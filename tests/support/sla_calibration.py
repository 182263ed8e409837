"""Simulated SLA verdicts at a claim's boundary, for the calibration test
(tests/analysis/test_sla_calibration.py) and bench/calibration_sla.py: draw runs from a
tests/support/correlated_runs model whose true p`q` equals the threshold, judge each by the rule
`peakload sla` uses (loadgen/results/clustered.py for a token-level claim on the per-request counts
of analysis.verdicts.clusters, loadgen/results/binomial.py for a per-request metric) and, for
comparison, by the per-token binomial rule used before issue #21."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.verdicts.clusters import request_counts
from loadgen.results.binomial import decide
from loadgen.results.clustered import decide_clustered
from tests.support import correlated_runs as cr


@dataclass(frozen=True, slots=True)
class Rates:
    """How often each rule passed (a false pass, at the boundary) over `draws` runs."""

    case: str
    metric: str
    draws: int
    requests: int
    alpha: float
    passed: int  # the rule peakload uses
    passed_per_token: int  # the per-token binomial rule (token metrics only; else = passed)
    mean_tokens: float

    def margin(self, p: float = 0.999) -> int:
        """The most false passes a calibrated rule gives with probability `p`: the `p`
        quantile of Binomial(draws, alpha)."""
        return int(stats.binom.ppf(p, self.draws, self.alpha))


CASES: dict[str, dict[str, float]] = {
    # gaps independent (no random effect, no autocorrelation)
    "independent": {"level_sigma": 0.0, "ar_phi": 0.0, "within_sigma": 0.3},
    # a per-request ITL level and AR(1) gaps: the usual shape of a stream
    "level+ar1": {"level_sigma": 0.25, "within_sigma": 0.15, "ar_phi": 0.8},
    # nearly all-or-nothing requests: the worst case the rule is exact for
    "all-or-nothing": {"level_sigma": 1.0, "within_sigma": 0.02, "ar_phi": 0.9},
    # stalls in 5 % of the requests (a fifth of their gaps), little else
    "clustered stalls": {
        "level_sigma": 0.1,
        "within_sigma": 0.1,
        "ar_phi": 0.5,
        "stall_requests": 0.05,
        "stall_rate": 0.2,
    },
}


def itl_at_boundary(
    case: str,
    *,
    draws: int,
    requests: int,
    percentile: float,
    confidence: float,
    chunks: tuple[int, int] = (20, 60),
    failure_rate: float = 0.0,
    seed: int = 0,
) -> Rates:
    """A token-level claim "p`percentile` itl_ms < 50" on runs whose true pooled p`percentile`
    is exactly 50 ms (failures, if any, are extra misses: the truth is then worse)."""
    # type: ignore[arg-type]
    base = cr.LevelModel(requests=requests, chunks=chunks, failure_rate=failure_rate, **CASES[case])
    model = cr.with_itl_quantile(base, percentile, 50.0)
    rng = np.random.default_rng(seed)
    new = old = 0
    tokens = 0
    for _ in range(draws):
        d = cr.draw(model, rng)
        failed = int((~d.ok).sum())
        m, k, _ = request_counts(d.chunks, d.ok, 50.0, failed)
        new += decide_clustered(m, k, percentile, confidence).verdict == "pass"
        old += decide(int(m.sum()), int(k.sum()), percentile, confidence) == "pass"
        tokens += int(m.sum())
    return Rates(case, "itl_ms", draws, requests, 1 - confidence, new, old, tokens / draws)


def ttft_at_boundary(
    *, draws: int, requests: int, percentile: float, confidence: float, seed: int = 0
) -> Rates:
    """A per-request claim "p`percentile` ttft_ms < 800" on runs whose true p`percentile` TTFT
    is exactly 800 ms (a level and its TTFT correlated, as in a loaded server)."""
    base = cr.LevelModel(requests=requests, chunks=(2, 2), ttft_level_corr=0.5)
    model = cr.with_ttft_quantile(base, percentile, 800.0)
    model = dataclasses.replace(model, requests=requests)
    rng = np.random.default_rng(seed)
    passed = 0
    for _ in range(draws):
        ttft = cr.draw(model, rng).ttft_ms
        k = int((ttft >= 800.0).sum())
        passed += decide(ttft.size, k, percentile, confidence) == "pass"
    return Rates("lognormal", "ttft_ms", draws, requests, 1 - confidence, passed, passed, 1.0)


@dataclass(frozen=True, slots=True)
class VerdictRates:
    """How often a whole run's verdict (claims x loads, analysis.verdicts.verdict's rule) failed
    and passed over `draws` runs, beside the rules used before: each test at its own alpha on
    the fail side (`failed_uncorrected`), and the claims over all loads pooled
    (`passed_pooled`)."""

    case: str
    draws: int
    tests: int
    alpha: float
    failed: int
    passed: int
    failed_uncorrected: int
    passed_pooled: int

    def margin(self, p: float = 0.999) -> int:
        return int(stats.binom.ppf(p, self.draws, self.alpha))


# claims on one per-request metric: their percentiles (the thresholds are their boundaries)
FAMILY_PERCENTILES = (50.0, 90.0, 99.0)


def verdict_over_loads(
    case: str,
    *,
    exceed: tuple[float, ...],
    draws: int,
    requests: int,
    confidence: float,
    seed: int = 0,
) -> VerdictRates:
    """Runs of len(`exceed`) loads, `requests` each, judged on the claims p50/p90/p99 of one
    per-request metric: at load i, claim j's true exceedance fraction is `exceed[i]` times its
    allowed one (1: exactly at the boundary, the claim holds; > 1: it is false). One uniform
    draw a request decides all three claims' exceedances, so the claims are as dependent as
    the percentiles of one sample are."""
    from analysis.verdicts import sla
    from analysis.verdicts.fail_family import adjust_fails

    claims = [sla.Claim(metric="ttft_ms", percentile=q, threshold=1.0) for q in FAMILY_PERCENTILES]
    allowed = np.array([1.0 - q / 100.0 for q in FAMILY_PERCENTILES])
    rng = np.random.default_rng(seed)
    failed = passed = uncorrected = pooled = 0
    for _ in range(draws):
        verdicts = []
        totals = np.zeros(len(claims), dtype=np.int64)
        for scale in exceed:
            u = rng.random(requests)
            ks = [int((u < min(1.0, a * scale)).sum()) for a in allowed]
            totals += ks
            verdicts += [
                sla.binomial_verdict(c, n=requests, k=k, confidence=confidence, observed=None)
                for c, k in zip(claims, ks, strict=True)
            ]
        judged = sla.exit_code(adjust_fails(verdicts))
        failed += judged.name == "FAILED"
        passed += judged.name == "PASSED"
        uncorrected += any(v.verdict == "fail" for v in verdicts)
        n_all = requests * len(exceed)
        pooled += all(
            decide(n_all, int(k), c.percentile, confidence) == "pass"
            for c, k in zip(claims, totals, strict=True)
        )
    tests = len(claims) * len(exceed)
    return VerdictRates(case, draws, tests, 1.0 - confidence, failed, passed, uncorrected, pooled)
