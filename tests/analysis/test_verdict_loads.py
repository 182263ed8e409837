"""A sweep's claims judged at each load, and the fail side as one family under Holm
(analysis.verdicts.loads, analysis.verdicts.fail_family, through verdict.judge_run and
judge_claims): the pooled verdict passed a sweep whose top load disproves its claim."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.verdicts import fail_family, sla, verdict
from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.loads import run_loads
from loadgen.errors import SpecError
from tests.analysis.storedata import T0, frame, level_row, run_row, streamed

RUN = "00000000-0000-0000-0000-0000000000f2"
P90_200 = {"metric": "ttft_ms", "percentile": 90, "threshold": 200}


def _requests(fast: int, slow: int, level: int, start: int) -> list[dict[str, Any]]:
    """`fast` requests with a TTFT of 100 ms and `slow` of 400 ms, at `level`."""
    return [
        streamed(
            RUN,
            start + i,
            sent_ns=0,
            offsets_us=[ttft * 1000, ttft * 1000 + 20_000],
            tokens=[1, 1],
            level=level,
        )
        for i, ttft in enumerate([100] * fast + [400] * slow)
    ]


def _levels(values: list[float], kind: str = "concurrency") -> pd.DataFrame:
    return pd.DataFrame(
        [
            level_row(
                RUN,
                i,
                kind=kind,
                value=v,
                duration_s=50.0,
                started_at=T0 + dt.timedelta(seconds=100 * i),
            )
            for i, v in enumerate(values)
        ]
    )


def _spec(*slos: dict[str, Any]) -> dict[str, Any]:
    # the far-off load bound: these synthetic levels' requests are not spread over their window
    return {"slos": list(slos), "max_error_rate": 1.0, "validity": {"max_load_shortfall": 1.0}}


def test_a_sweep_whose_top_load_disproves_its_claim_fails_though_its_pool_passes() -> None:
    """1,000 requests at 4 streams with 5 % over 200 ms, 50 at 16 streams with 40 % over: the
    pool (6.7 % over, 10 % allowed) passes p90 < 200; the top load alone fails it."""
    df = frame(_requests(950, 50, level=0, start=0) + _requests(30, 20, level=1, start=1000))
    levels = _levels([4.0, 16.0])
    pooled = sla.evaluate(df, [sla.Claim(**P90_200)], confidence=0.99)[0]
    assert pooled.verdict == "pass"  # what the exit code said before
    j = verdict.judge_run(run_row(RUN, spec=_spec(P90_200)), df, levels)
    assert j.code is Exit.FAILED, j.reason
    assert j.loads == 2 and "@ level 1: concurrency 16" in j.reason
    by_claim = {v.claim: v.verdict for v in j.verdicts if v.metric == "ttft_ms"}
    assert by_claim == {
        "p90 ttft_ms < 200 @ level 0: concurrency 4": "pass",
        "p90 ttft_ms < 200 @ level 1: concurrency 16": "fail",
    }
    # `peakload sla` with the same claim in a file says the same
    claims = sla.parse_claims({"max_error_rate": 1.0, "claims": [P90_200]})
    j = verdict.judge_claims(run_row(RUN, spec=_spec()), df, claims, levels=levels)
    assert j.code is Exit.FAILED
    # a claim that asks for the pool is judged on every steady request (a whole-run claim)
    whole = sla.parse_claims({"max_error_rate": 1.0, "claims": [{**P90_200, "pooled": True}]})
    j = verdict.judge_claims(run_row(RUN, spec=_spec()), df, whole, levels=levels)
    assert j.code is Exit.PASSED and j.loads == 1
    assert j.verdicts[0].claim == "p90 ttft_ms < 200 (all levels pooled)"
    with pytest.raises(SpecError, match=r"claims\[0\]: `pooled` and `level` exclude each other"):
        sla.parse_claims({"claims": [{**P90_200, "pooled": True, "level": 1}]})
    # a claim that names a level is judged there alone, as before
    named = sla.parse_claims({"max_error_rate": 1.0, "claims": [{**P90_200, "level": 0}]})
    j = verdict.judge_claims(run_row(RUN, spec=_spec()), df, named, levels=levels)
    assert j.code is Exit.PASSED and j.loads == 1
    assert j.verdicts[0].claim == "p90 ttft_ms < 200 (level 0)"


def test_a_sweep_passes_only_when_every_load_passes() -> None:
    both = frame(_requests(100, 0, level=0, start=0) + _requests(100, 0, level=1, start=1000))
    j = verdict.judge_run(run_row(RUN, spec=_spec(P90_200)), both, _levels([1.0, 2.0]))
    assert j.code is Exit.PASSED and j.loads == 2
    # 100 + 30 requests: the pool would pass; 30 cannot prove a p90 at 99 % (44 needed)
    short = frame(_requests(100, 0, level=0, start=0) + _requests(30, 0, level=1, start=1000))
    j = verdict.judge_run(run_row(RUN, spec=_spec(P90_200)), short, _levels([1.0, 2.0]))
    assert j.code is Exit.UNDECIDABLE and "@ level 1" in j.reason


def test_levels_that_ran_one_load_again_are_pooled_as_one_load() -> None:
    df = frame(
        _requests(30, 0, level=0, start=0)
        + _requests(30, 0, level=1, start=1000)
        + _requests(60, 0, level=2, start=2000)
    )
    levels = _levels([8.0, 8.0, 16.0])
    loads = run_loads(df, levels)
    assert [(ld.levels, ld.value) for ld in loads] == [((0, 1), 8.0), ((2,), 16.0)]
    assert [int(ld.rows.sum()) for ld in loads] == [60, 60]
    j = verdict.judge_run(run_row(RUN, spec=_spec(P90_200)), df, levels)
    assert j.code is Exit.PASSED, j.reason
    assert "@ levels 0, 1: concurrency 8" in j.verdicts[0].claim


def test_a_fail_must_survive_holm_over_the_runs_tests() -> None:
    """50 requests with 11 over a p90 threshold: P(Bin(50, 0.1) >= 11) = 0.0094 disproves the
    claim at 99 % alone, not beside a second test (Holm: 0.0094 x 2 > 0.01); 12 over (0.0032)
    does."""
    spec = {"slos": [P90_200], "max_error_rate": 0.01, "validity": {"max_load_shortfall": 1.0}}
    alone = _spec(P90_200)  # the budget turned off: no second test
    eleven = frame(_requests(39, 11, level=0, start=0))
    j = verdict.judge_run(run_row(RUN, spec=alone), eleven)
    assert j.code is Exit.FAILED and j.verdicts[-1].p_fail_adjusted is None  # budget: no test
    j = verdict.judge_run(run_row(RUN, spec=spec), eleven)
    assert j.code is Exit.UNDECIDABLE, j.reason
    claim = j.verdicts[0]
    assert claim.verdict == "insufficient samples" and claim.family == 2 and claim.fail_held
    assert claim.p_fail_adjusted is not None and np.isclose(claim.p_fail_adjusted, 2 * claim.p_fail)
    assert "not under Holm over the run's 2 fail-side tests" in j.reason
    j = verdict.judge_run(run_row(RUN, spec=spec), frame(_requests(38, 12, level=0, start=0)))
    assert j.code is Exit.FAILED and "Holm over the run's 2 fail-side tests" in j.reason


def test_a_claims_own_confidence_weighs_its_place_in_the_family() -> None:
    """Two tests, one at 99 % and one at 90 %: each is compared with its own alpha, halved
    (Holm's first step), the 90 % claim's fail p-value 0.0094 against 0.05."""
    claims = sla.parse_claims(
        {
            "max_error_rate": 1.0,
            "claims": [
                {**P90_200, "confidence": 0.9},
                {"metric": "ttft_ms", "percentile": 50, "threshold": 1000},
            ],
        }
    )
    df = frame(_requests(39, 11, level=0, start=0))
    verdicts = verdict.judge_claims(run_row(RUN, spec=_spec()), df, claims).verdicts
    assert verdicts[0].verdict == "fail" and verdicts[0].family == 2
    assert np.isclose(verdicts[0].p_fail_adjusted or 0.0, 2 * verdicts[0].p_fail)


def test_holm_leaves_passes_alone_and_counts_only_tests() -> None:
    df = frame(_requests(100, 0, level=0, start=0))
    v = sla.evaluate(df, [sla.Claim(**P90_200)], confidence=0.99)
    load = verdict.load_delivered([], 0.05)
    assert load is None
    out = fail_family.adjust_fails([*v, verdict.error_budget(df, 1.0, 0.99)])
    assert out[0].verdict == "pass" and out[0].family == 1 and out[1].family is None


def test_levels_without_a_configured_value_are_one_load_each_kind() -> None:
    df = frame(_requests(50, 0, level=0, start=0) + _requests(50, 0, level=1, start=1000))
    levels = _levels([float("nan"), float("nan")], kind="trace")
    loads = run_loads(df, levels)
    assert [(ld.levels, ld.value, ld.label()) for ld in loads] == [((0, 1), None, "levels 0, 1")]
    assert int(loads[0].rows.sum()) == 100
