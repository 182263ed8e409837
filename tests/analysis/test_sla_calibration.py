"""Calibration of the SLA verdicts, measured (issue #21, RELIABILITY V3): at a claim's boundary
(the true percentile equals the threshold) a claim passes at most 1 - confidence of the time,
with a binomial margin, over >= 200 simulated runs with correlation within requests
(tests/support/correlated_runs.py); the per-token binomial rule used before fails the same
simulation. And a handful of requests cannot prove a p99 ITL claim, however many tokens."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.verdicts import sla
from analysis.verdicts.clusters import request_counts
from loadgen.results.clustered import decide_clustered, min_requests
from tests.support import correlated_runs as cr
from tests.support import sla_calibration as sc


@pytest.mark.parametrize("case", ["level+ar1", "all-or-nothing", "clustered stalls"])
def test_itl_claim_false_pass_rate_at_the_boundary(case: str) -> None:
    r = sc.itl_at_boundary(case, draws=200, requests=100, percentile=90, confidence=0.9, seed=11)
    assert r.passed <= r.margin(), r  # the rule: at most alpha, within the binomial margin
    assert r.passed_per_token > r.margin(), r  # the per-token rule: far above alpha


def test_p99_itl_claim_false_pass_rate_at_the_boundary() -> None:
    r = sc.itl_at_boundary("level+ar1", draws=200, requests=600, percentile=99, confidence=0.99)
    assert r.passed <= r.margin(), r
    assert r.passed_per_token > r.margin(), r


def test_ttft_claim_false_pass_rate_at_the_boundary() -> None:
    for q, conf, n in ((99, 0.99, 600), (90, 0.9, 100)):
        r = sc.ttft_at_boundary(draws=400, requests=n, percentile=q, confidence=conf, seed=q)
        assert r.passed <= r.margin(), r


def test_the_rule_passes_a_claim_with_room() -> None:
    """Not vacuous: 1,000 requests whose true p99.8 is the threshold pass a p99 claim."""
    model = cr.with_itl_quantile(cr.LevelModel(requests=1000, chunks=(20, 60)), 99.8, 50.0)
    passed = 0
    rng = np.random.default_rng(4)
    for _ in range(20):
        d = cr.draw(model, rng)
        m, k, _ = request_counts(d.chunks, d.ok, 50.0, 0)
        passed += decide_clustered(m, k, 99, 0.99).verdict == "pass"
    assert passed >= 18


def test_minimum_requests_is_the_per_request_binomial_count() -> None:
    assert min_requests(99, 0.99) == 459 == sla.min_samples_to_pass(99, 0.99)
    assert min_requests(90, 0.99) == 44 == sla.min_samples_to_pass(90, 0.99)
    # 458 perfect requests of 1,000 tokens each are not enough; 459 are
    assert decide_clustered(np.full(458, 1000), np.zeros(458), 99, 0.99).verdict == (
        "insufficient samples"
    )
    assert decide_clustered(np.full(459, 1000), np.zeros(459), 99, 0.99).verdict == "pass"


@pytest.mark.parametrize(("requests", "tokens"), [(10, 500), (6, 300)])
def test_a_few_requests_cannot_prove_a_p99_itl_claim(requests: int, tokens: int) -> None:
    """V3: 10 requests x 500 tokens (and the issue's 6 x 300), every gap far below the
    threshold: undecidable, n = the requests, the tokens beside it (the per-token rule passed)."""
    model = cr.LevelModel(requests=requests, chunks=(tokens, tokens), itl_median=10.0)
    df, chunks, _ = cr.draw_frame([model], seed=1)
    claims = sla.parse_claims({"claims": [{"metric": "itl_ms", "percentile": 99, "threshold": 50}]})
    (v,) = sla.evaluate(df, claims, chunks=chunks)
    assert (v.verdict, v.n, v.tokens, v.exceedances) == (
        "insufficient samples",
        requests,
        requests * (tokens - 1),
        0,
    )
    assert v.samples_needed == 459 and "requests" in v.rule
    assert sla.decide(requests * (tokens - 1), 0, 99, 0.99) == "pass"  # the old rule's answer
    assert sla.exit_code([v]) == 3


def test_evaluate_decides_as_the_simulation_does() -> None:
    """The frame path (`peakload sla`) and the array path of the simulation agree."""
    model = cr.with_itl_quantile(
        cr.LevelModel(requests=600, chunks=(5, 20), failure_rate=0.01), 99.5, 50.0
    )
    df, chunks, (d,) = cr.draw_frame([model], seed=2)
    claims = sla.parse_claims({"claims": [{"metric": "itl_ms", "percentile": 99, "threshold": 50}]})
    (v,) = sla.evaluate(df, claims, chunks=chunks)
    failed = int((~d.ok).sum())
    m, k, _ = request_counts(d.chunks, d.ok, 50.0, failed)
    want = decide_clustered(m, k, 99, 0.99)
    assert (v.verdict, v.n, v.tokens, v.exceedances) == (
        want.verdict,
        want.requests,
        want.tokens,
        want.exceedances,
    )
    assert v.n == 600 and failed > 0


def test_a_run_meeting_every_claim_at_every_load_is_failed_at_most_alpha() -> None:
    """p50/p90/p99 at 4 loads, each claim exactly at its boundary (12 true claims): the verdict
    fails at most alpha of the runs (Holm, analysis/verdicts/fail_family.py); each test at its
    own alpha failed far more."""
    r = sc.verdict_over_loads(
        "every claim at its boundary", exceed=(1.0,) * 4, draws=300, requests=600,
        confidence=0.99, seed=5,
    )  # fmt: skip
    assert r.failed <= r.margin(), r
    assert r.failed_uncorrected > r.margin(), r


def test_a_sweep_whose_top_load_is_at_its_boundary_passes_at_most_alpha() -> None:
    """Three loads well within their claims, the top one exactly at its boundary (its claims
    unproven): the per-load verdict passes at most alpha of the runs; the pool passed nearly
    all. With every load within, it passes most runs (the test is not vacuous)."""
    top = sc.verdict_over_loads(
        "top load at its boundary", exceed=(0.2, 0.2, 0.2, 1.0), draws=300, requests=2000,
        confidence=0.99, seed=6,
    )  # fmt: skip
    assert top.passed <= top.margin(), top
    assert top.passed_pooled > top.margin(), top
    within = sc.verdict_over_loads(
        "every load within", exceed=(0.2,) * 4, draws=100, requests=2000, confidence=0.99, seed=7
    )
    assert within.passed >= 80, within
