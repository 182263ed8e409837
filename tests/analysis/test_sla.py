"""SLA verdicts: the exact binomial rule against reference values, claims parsing, exit codes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from analysis.verdicts import sla
from loadgen.errors import SpecError
from tests.analysis.storedata import frame, request_row, streamed

RUN = "00000000-0000-0000-0000-0000000000c1"


def test_reference_sample_counts() -> None:
    # MLPerf LoadGen early stopping: p99 at 99% with no exceedance needs 459 samples
    assert 0.99**458 > 0.01 >= 0.99**459
    assert sla.min_samples_to_pass(99, 0.99, 0) == 459
    # p90 at 99%: 0.9^43 = 0.0108 > 0.01 >= 0.9^44 = 0.0097
    assert 0.9**43 > 0.01 >= 0.9**44
    assert sla.min_samples_to_pass(90, 0.99, 0) == 44
    # p99 at 95%: 0.99^298 = 0.0500... > 0.05 >= 0.99^299
    assert sla.min_samples_to_pass(99, 0.95, 0) == 299
    # one exceedance, p99 at 99%: P(Bin(n, .01) <= 1) <= .01 first holds at n = 662
    assert sla.min_samples_to_pass(99, 0.99, 1) == 662
    assert sla.pass_p_value(661, 1, 0.01) > 0.01 >= sla.pass_p_value(662, 1, 0.01)
    # p99.9 at 99%: ceil(ln 0.01 / ln 0.999) = 4603
    assert sla.min_samples_to_pass(99.9, 0.99, 0) == math.ceil(math.log(0.01) / math.log(0.999))


def test_decide_boundaries() -> None:
    assert sla.decide(458, 0, 99, 0.99) == "insufficient samples"
    assert sla.decide(459, 0, 99, 0.99) == "pass"
    assert sla.decide(0, 0, 99, 0.99) == "insufficient samples"
    # 5 exceedances in 100 for a p99 claim: P(Bin(100, .01) >= 5) = 0.00343 <= .01 -> fail
    by_hand = 1 - sum(math.comb(100, j) * 0.01**j * 0.99 ** (100 - j) for j in range(5))
    assert sla.fail_p_value(100, 5, 0.01) == pytest.approx(by_hand, rel=1e-9)
    assert by_hand == pytest.approx(0.003432, abs=1e-6)
    assert sla.decide(100, 5, 99, 0.99) == "fail"
    # 3 in 100: P(>= 3) = 0.0794 -> neither
    assert sla.decide(100, 3, 99, 0.99) == "insufficient samples"


def test_clopper_pearson_matches_decision() -> None:
    # the pass rule is the upper CP bound at or below the allowed fraction
    for n, k in [(459, 0), (458, 0), (662, 1), (5000, 30), (5000, 40)]:
        lo, hi = sla.clopper_pearson(n, k, 0.99)
        assert (hi <= 0.01 + 1e-12) == (sla.decide(n, k, 99, 0.99) == "pass")
        assert lo <= k / n <= hi
    # zero exceedances: upper bound 1 - (1 - C)^(1/n)
    assert sla.clopper_pearson(459, 0, 0.99)[1] == pytest.approx(1 - 0.01 ** (1 / 459))


def _run(n_ok: int, slow: int, failed: int = 0) -> list[dict[str, object]]:
    rows = []
    for i in range(n_ok):
        first = 900_000 if i < slow else 100_000  # µs from send
        rows.append(
            streamed(
                RUN,
                i,
                sent_ns=0,
                offsets_us=[first, first + 10_000],
                tokens=[1, 1],
                prompt_tokens=100 + (i % 2) * 10_000,
                region="eu" if i % 3 else "us",
            )
        )
    for j in range(failed):
        rows.append(
            request_row(
                RUN, n_ok + j, outcome="timeout", error_phase="first_token", end_ns=30_000_000_000
            )
        )
    return rows


def test_evaluate_on_requests() -> None:
    df = frame(_run(500, slow=0))
    claims = sla.parse_claims(
        {"claims": [{"metric": "ttft_ms", "percentile": 99, "threshold": 800}]}
    )
    (v,) = sla.evaluate(df, claims)
    assert (v.verdict, v.n, v.exceedances, v.observed) == ("pass", 500, 0, 100.0)
    # conditions: long prompts are every other request: 250 samples -> insufficient
    long = sla.parse_claims(
        {
            "claims": [
                {
                    "metric": "ttft_ms",
                    "percentile": 99,
                    "threshold": 800,
                    "prompt_tokens": {"min": 1000},
                }
            ]
        }
    )
    (v2,) = sla.evaluate(df, long)
    assert (v2.n, v2.verdict, v2.samples_needed) == (250, "insufficient samples", 459)
    # 10 slow of 500 (2%) against p99: P(Bin(500, .01) >= 10) = 0.03 -> not yet evidence;
    # 15 slow: P(>= 15) < 0.001 -> fail. Failures count as exceedances by default.
    (v10,) = sla.evaluate(frame(_run(500, slow=10)), claims)
    assert (v10.exceedances, v10.verdict) == (10, "insufficient samples")
    (v3,) = sla.evaluate(frame(_run(500, slow=15)), claims)
    assert (v3.exceedances, v3.verdict) == (15, "fail")
    df_fail = frame(_run(500, slow=0, failed=15))
    (v4,) = sla.evaluate(df_fail, claims)
    assert (v4.n, v4.exceedances, v4.verdict) == (515, 15, "fail")
    excl = sla.parse_claims(
        {
            "claims": [
                {"metric": "ttft_ms", "percentile": 99, "threshold": 800, "failures": "exclude"}
            ]
        }
    )
    assert sla.evaluate(df_fail, excl)[0].verdict == "pass"
    # ITL per token: one 10 ms gap per request
    itl = sla.parse_claims(
        {"claims": [{"metric": "itl_ms", "percentile": 90, "threshold": 11, "region": "us"}]}
    )
    (v5,) = sla.evaluate(df, itl)
    assert v5.n == len([i for i in range(500) if i % 3 == 0]) and v5.verdict == "pass"
    assert (
        sla.exit_code([v, v2]) == 3 and sla.exit_code([v, v2, v3]) == 1
    )  # analysis.verdicts.exitcodes
    assert sla.exit_code([v]) == 0
    assert np.isfinite(v3.exceed_upper)


def test_minimal_claims_file_as_written(tmp_path: Path) -> None:
    p = tmp_path / "claims.toml"
    p.write_text('[[claims]]\nmetric = "ttft_ms"\npercentile = 99\nthreshold = 800\n')
    cf = sla.load_claims(p)
    assert cf.confidence == 0.99 and cf.claims[0].label() == "p99 ttft_ms < 800"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[[claims]]\nmetric = "ttft"\npercentile = 99\nthreshold = 800\n', "claims[0].metric"),
        (
            '[[claims]]\nmetric = "ttft_ms"\npercentile = 100\nthreshold = 800\n',
            "claims[0].percentile",
        ),
        (
            '[[claims]]\nmetric = "ttft_ms"\npercentile = 99\nthreshold = 800\nlevl = 1\n',
            "claims[0].levl: unknown field",
        ),
        ("claims = []\n", "claims:"),
        ("[[claims]\n", "not valid TOML"),
    ],
)
def test_bad_claims_name_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        sla.load_claims(p)
    assert str(p) in str(e.value) and where in str(e.value)


def test_missing_claims_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="file not found"):
        sla.load_claims(tmp_path / "none.toml")


def test_requests_peakload_stopped_are_only_its_own_cancellations_and_unsent() -> None:
    """stopped_rows: cancelled or not sent *because peakload stopped* (its reasons), never a
    failed request whatever its phase, nor one cancelled for another reason."""
    from loadgen.results import reasons

    cases = [
        ("ok", None, False),
        ("cancelled", reasons.ABORTED, True),
        ("not_sent", reasons.RUN_ENDED, True),
        ("cancelled", reasons.TIMED_OUT, True),
        ("cancelled", "client_disconnect", False),
        ("not_sent", None, False),
        ("http_error", reasons.ABORTED, False),  # a failure, whatever its phase says
        ("timeout", reasons.TIMED_OUT, False),
    ]
    rows = []
    for i, (outcome, phase, _) in enumerate(cases * 3):
        r = request_row("00000000-0000-0000-0000-0000000005ee", i, outcome=outcome)
        r["error_phase"] = phase
        rows.append(r)
    got = sla.stopped_rows(frame(rows))
    assert got.tolist() == [want for _, _, want in cases * 3]
    assert got.flags.writeable  # the caller's own array
