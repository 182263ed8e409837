"""A run judged against its spec's criteria (analysis.verdicts.verdict): the error budget with the
exact binomial rule, the SLOs as claims, and the run's state first; the one exit-code table."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.verdicts import exitcodes, verdict
from analysis.verdicts.exitcodes import Exit
from tests.analysis.storedata import T0, frame, level_row, request_row, run_row, streamed

RUN = "00000000-0000-0000-0000-0000000000e1"
ROOT = Path(__file__).resolve().parents[2]


def requests(
    ok: int, failed: int, *, ttft_ms: int = 100, level: int = 0, start: int = 0
) -> list[dict[str, Any]]:
    rows = [
        streamed(
            RUN,
            start + i,
            sent_ns=0,
            offsets_us=[ttft_ms * 1000, ttft_ms * 1000 + 20_000],
            tokens=[1, 1],
            level=level,
        )
        for i in range(ok)
    ]
    rows += [
        request_row(RUN, start + ok + i, outcome="http_error", http_status=429, level=level)
        for i in range(failed)
    ]
    return rows


def run(**over: Any) -> dict[str, Any]:
    return run_row(RUN, **over)


def test_a_60_percent_429_run_fails_its_default_error_budget() -> None:
    df = frame(requests(7, 11))  # the run: 7 ok, 11 failed
    j = verdict.judge_run(run(), df)
    assert j.code is Exit.FAILED
    budget = j.verdicts[-1]
    assert budget.metric == "error_rate" and budget.verdict == "fail"
    assert budget.n == 18 and budget.exceedances == 11 and budget.allowed == pytest.approx(0.01)


def test_the_error_budget_needs_enough_requests_to_pass() -> None:
    # 1% at 99% with no failure: 459 requests pass, 458 cannot decide (as `sla` for a p99)
    assert verdict.judge_run(run(), frame(requests(459, 0))).code is Exit.PASSED
    few = verdict.judge_run(run(), frame(requests(458, 0)))
    assert few.code is Exit.UNDECIDABLE and few.verdicts[-1].samples_needed == 459
    # one failure in 100 is not proof of more than 1%, nor of less
    assert verdict.judge_run(run(), frame(requests(99, 1))).code is Exit.UNDECIDABLE


def test_the_spec_sets_the_budget_and_the_slos() -> None:
    lenient = run(spec={"max_error_rate": 1.0, "slos": []})
    assert verdict.judge_run(lenient, frame(requests(7, 11))).code is Exit.PASSED
    none_allowed = run(spec={"max_error_rate": 0.0})
    assert verdict.judge_run(none_allowed, frame(requests(5, 0))).code is Exit.PASSED
    assert verdict.judge_run(none_allowed, frame(requests(500, 1))).code is Exit.FAILED
    slo = {"metric": "ttft_ms", "percentile": 90, "threshold": 50}
    slow = run(spec={"max_error_rate": 1.0, "slos": [slo]})
    j = verdict.judge_run(slow, frame(requests(100, 0, ttft_ms=100)))
    assert j.code is Exit.FAILED and "p90 ttft_ms < 50" in j.reason


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"status": "partial"}, Exit.PARTIAL),
        ({"status": "aborted"}, Exit.PARTIAL),
        ({"status": "running", "valid": None}, Exit.PARTIAL),
        ({"valid": False, "invalid_reasons": ["dispatch delay p99 9 ms"]}, Exit.INVALID),
        ({"status": "partial", "valid": False}, Exit.PARTIAL),
    ],
)
def test_the_runs_state_decides_first(over: dict[str, Any], code: Exit) -> None:
    j = verdict.judge_run(run(spec={"max_error_rate": 1.0}, **over), frame(requests(500, 0)))
    assert j.code is code
    assert j.verdicts  # what the numbers say is still shown


def test_an_empty_run_never_passes() -> None:
    rows = [request_row(RUN, i, phase="warmup") for i in range(3)]
    j = verdict.judge_run(run(spec={"max_error_rate": 1.0}), frame(rows))
    assert j.code is Exit.UNDECIDABLE and "empty" in j.reason


def test_a_saturation_search_is_judged_at_its_best_level() -> None:
    spec = {
        "load": {"saturation": {"start": 1, "max": 8}},
        "slos": [{"metric": "ttft_ms", "percentile": 90, "threshold": 200}],
    }
    df = frame(
        requests(500, 0, ttft_ms=100, level=0)
        + requests(500, 0, ttft_ms=100, level=1, start=1000)
        + requests(300, 200, ttft_ms=400, level=2, start=2000)
    )
    levels = pd.DataFrame(  # each level's window holds its requests (100 ms apart)
        [
            level_row(
                RUN, i, value=v, duration_s=50.0, started_at=T0 + dt.timedelta(seconds=100 * i)
            )
            for i, v in enumerate([1.0, 2.0, 4.0])
        ]
    )
    j = verdict.judge_run(run(spec=spec), df, levels)
    assert j.code is Exit.PASSED and j.level == 1
    only_bad = df[(df["level"] == 2).to_numpy()]
    assert verdict.judge_run(run(spec=spec), only_bad, levels[2:]).code is Exit.FAILED


def test_one_exit_code_table_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert exitcodes.markdown_table() in readme
    assert len({int(c) for c in Exit}) == len(Exit) == len(exitcodes.TABLE)


def _short_run(late: int) -> tuple[Any, Any]:
    """A rate level of 100 requests, 100 ms apart over its 10 s window, the last `late` of
    them sent 20 s late (after the window: the generator fell behind)."""
    rows = requests(100, 0)
    for r in rows[100 - late :]:
        r["sent_ns"] += 20_000 * 1_000_000
        r["first_token_ns"] += 20_000 * 1_000_000
        r["first_answer_ns"] += 20_000 * 1_000_000
        r["end_ns"] += 20_000 * 1_000_000
    levels = pd.DataFrame([level_row(RUN, 0, kind="rate", value=10.0, duration_s=10.0)])
    return frame(rows), levels


def test_a_claim_on_a_level_short_of_its_load_is_undecidable_unless_it_fails() -> None:
    """Point 7 of issue #21: 20 % short (bound 5 %) makes a passing claim undecidable (exit 3),
    a failing one still fails (exit 1); 4 % short is judged as usual."""
    from analysis.verdicts import sla

    ok = sla.parse_claims(
        {
            "max_error_rate": 1.0,
            "claims": [{"metric": "ttft_ms", "percentile": 50, "threshold": 500}],
        }
    )
    bad = sla.parse_claims(
        {"max_error_rate": 1.0, "claims": [{"metric": "ttft_ms", "percentile": 50, "threshold": 1}]}
    )
    df, levels = _short_run(late=20)
    j = verdict.judge_claims(run(), df, ok, levels=levels)
    assert j.code is Exit.UNDECIDABLE and "load delivered" in j.reason and "20.0% short" in j.reason
    assert verdict.judge_claims(run(), df, bad, levels=levels).code is Exit.FAILED
    df, levels = _short_run(late=4)
    assert verdict.judge_claims(run(), df, ok, levels=levels).code is Exit.PASSED
    # the exit verdict of `run` judges it too
    spec = {
        "slos": [{"metric": "ttft_ms", "percentile": 50, "threshold": 500}],
        "max_error_rate": 1.0,
    }
    df, levels = _short_run(late=20)
    assert verdict.judge_run(run(spec=spec), df, levels).code is Exit.UNDECIDABLE


def test_requests_peakload_stopped_never_count_in_the_error_budget() -> None:
    """#22: an abort cancels 40 requests in flight; the budget judges the 500 it did not stop."""
    rows = requests(500, 0) + [
        request_row(RUN, 1000 + i, outcome="cancelled", error_phase="aborted") for i in range(40)
    ]
    b = verdict.error_budget(frame(rows), 0.01, 0.99)
    assert (b.n, b.exceedances, b.stopped, b.verdict) == (500, 0, 40, "pass")
    # a cancel peakload did not cause (a level's end under between_levels = "cancel") counts
    rows[-1]["error_phase"] = "level_ended"
    b = verdict.error_budget(frame(rows), 0.01, 0.99)
    assert (b.n, b.exceedances, b.stopped) == (501, 1, 39)


def test_a_search_judged_on_chunk_arrays_gives_the_verdicts_of_the_per_row_arrays() -> None:
    """`peakload run`'s summary loads the fast frame (no per-row arrays, analysis.store.fastload)
    and passes its chunks: each tried load's ITL claim must see exactly that load's chunks."""
    from analysis.metrics import ChunkArrays

    spec = {
        "load": {"saturation": {"start": 1, "max": 8}},
        "slos": [{"metric": "itl_ms", "percentile": 90, "threshold": 30}],
        "max_error_rate": 1.0,
    }
    rows = requests(500, 0, level=0) + requests(500, 0, level=1, start=1000)
    slow = [  # ITL 50 ms at the highest load
        streamed(
            RUN,
            2000 + i,
            sent_ns=0,
            offsets_us=[100_000, 150_000, 200_000],
            tokens=[1, 1, 1],
            level=2,
        )
        for i in range(500)
    ]
    df = frame(rows + slow)
    levels = pd.DataFrame(
        [
            level_row(
                RUN, i, value=v, duration_s=50.0, started_at=T0 + dt.timedelta(seconds=100 * i)
            )
            for i, v in enumerate([1.0, 2.0, 4.0])
        ]
    )
    per_row = verdict.judge_run(run(spec=spec), df, levels)
    assert per_row.code is Exit.PASSED and per_row.level == 1
    bare = df.drop(columns=["chunk_offsets_us", "chunk_tokens", "chunk_choices"], errors="ignore")
    flat = verdict.judge_run(run(spec=spec), bare, levels, chunks=ChunkArrays.from_frame(df))
    assert flat.to_json() == per_row.to_json()
    worst = verdict.judge_run(run(spec=spec), df[df["level"] == 2], levels[2:])
    assert worst.code is Exit.FAILED


def test_chunk_arrays_take_the_selected_requests_chunks() -> None:
    from analysis.metrics import ChunkArrays

    ch = ChunkArrays.from_lists([[1, 2], [], [3, 4, 5], [6]], [[1, 1], [], [2, 1, 1], [4]])
    got = ch.take([True, False, True, False])
    assert got.offsets_us.tolist() == [1, 2, 3, 4, 5]
    assert got.tokens.tolist() == [1, 1, 2, 1, 1]
    assert got.ptr.tolist() == [0, 2, 5]
    with pytest.raises(ValueError, match="rows select from 3 requests"):
        ch.take([True, True, True])
