"""`peakload compare`'s verdict (analysis.verdicts.regression): error rate by Fisher's exact test,
throughput, latencies, levels paired by configured load, and "cannot compare"."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.regression import compare_stored, pair_levels
from tests.analysis.storedata import frame, level_row, request_row, run_row, streamed

B, C = "00000000-0000-0000-0000-0000000000b1", "00000000-0000-0000-0000-0000000000c1"


def reqs(
    run_id: str, ok: int, failed: int, *, level: int = 0, scale: float = 1.0, seed: int = 0
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = [
        streamed(
            run_id,
            level * 10_000 + i,
            sent_ns=0,
            offsets_us=[int(scale * rng.gamma(9, 10_000)), 200_000],
            tokens=[1, 1],
            level=level,
        )
        for i in range(ok)
    ]
    rows += [
        request_row(
            run_id, level * 10_000 + ok + i, outcome="http_error", http_status=429, level=level
        )
        for i in range(failed)
    ]
    return rows


def levels(run_id: str, values: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            level_row(run_id, i, kind="concurrency", value=v, duration_s=60.0)
            for i, v in enumerate(values)
        ]
    )


def judge(
    b_rows: list[dict[str, Any]],
    c_rows: list[dict[str, Any]],
    b_lv: pd.DataFrame | None = None,
    c_lv: pd.DataFrame | None = None,
    b_run: dict[str, Any] | None = None,
    c_run: dict[str, Any] | None = None,
) -> Any:
    return compare_stored(
        b_run or run_row(B),
        c_run or run_row(C),
        frame(b_rows),
        frame(c_rows),
        levels(B, [4.0]) if b_lv is None else b_lv,
        levels(C, [4.0]) if c_lv is None else c_lv,
        metrics=("ttft_ms",),
        resamples=200,
    )


def test_failed_requests_are_a_regression_not_ok() -> None:
    # the candidate: 11 of 18 failed, the ok ones as fast as the baseline's
    res = judge(reqs(B, 400, 0), reqs(C, 7, 11, seed=1))
    assert res.code is Exit.FAILED
    err = res.rows[res.rows["metric"] == "error_rate"].iloc[0]
    assert err["regression"] and err["p_value"] < 1e-6 and "error_rate" in res.reason
    # every request failed: still a verdict (error rate and throughput), never "—, ok"
    allfail = judge(reqs(B, 400, 0), reqs(C, 0, 10))
    assert allfail.code is Exit.FAILED
    assert set(allfail.rows[allfail.rows["regression"]]["metric"]) >= {"error_rate", "request_rate"}


def test_the_same_server_is_no_regression() -> None:
    res = judge(reqs(B, 400, 2), reqs(C, 400, 3, seed=1))
    assert res.code is Exit.PASSED, res.rows[res.rows["regression"]]
    assert {"error_rate", "request_rate", "output_tokens_per_s", "ttft_ms"} <= set(
        res.rows["metric"]
    )


def test_a_throughput_fall_is_a_regression() -> None:
    res = judge(reqs(B, 600, 0), reqs(C, 300, 0, seed=1))
    rate = res.rows[res.rows["metric"] == "request_rate"].iloc[0]
    # requests completed inside the 60 s window: the baseline's last two (scheduled at 59.8 and
    # 59.9 s, 0.2 s long) end at or after its end, so 598 against the candidate's 300
    assert res.code is Exit.FAILED and rate["regression"]
    assert rate["delta_pct"] == pytest.approx(100 * (300 / 598 - 1))


def test_levels_are_paired_by_configured_load_not_index() -> None:
    # the candidate skipped concurrency 1: its level 0 is concurrency 4
    b = reqs(B, 400, 0, level=0) + reqs(B, 400, 0, level=1, scale=3.0)
    c = reqs(C, 400, 0, level=0, scale=3.0, seed=2)
    res = judge(b, c, levels(B, [1.0, 4.0]), levels(C, [4.0]))
    assert set(res.rows["load"]) == {"concurrency 4"}
    assert set(res.rows["level"]) == {1} and set(res.rows["candidate_level"]) == {0}
    assert res.code is Exit.PASSED  # level 1 against level 0 by index would be a regression
    assert "only the baseline ran concurrency 1" in res.notes[0]
    pairs, _ = pair_levels(levels(B, [1.0, 4.0]), levels(C, [4.0, 1.0]))
    assert pairs == [(0, 1, "concurrency 1"), (1, 0, "concurrency 4")]


def test_an_invalid_partial_or_empty_side_cannot_be_compared() -> None:
    good = reqs(B, 400, 0)
    inv = judge(good, reqs(C, 400, 0), c_run=run_row(C, valid=False, invalid_reasons=["cpu"]))
    assert inv.code is Exit.CANNOT_COMPARE and "candidate's measurement is invalid" in inv.reason
    part = judge(good, reqs(C, 400, 0), b_run=run_row(B, status="partial"))
    assert part.code is Exit.CANNOT_COMPARE and "baseline is partial" in part.reason
    empty = judge(good, [request_row(C, 0, phase="warmup")])
    assert empty.code is Exit.CANNOT_COMPARE and "candidate is empty" in empty.reason
    disjoint = judge(good, reqs(C, 400, 0), c_lv=levels(C, [8.0]))
    assert disjoint.code is Exit.CANNOT_COMPARE and len(disjoint.rows) == 0


def test_one_adapter_slower_is_a_regression_named_by_its_adapter() -> None:
    """Per-adapter rows (deploy/sql/0220): the candidate's `chat` adapter is twice as slow to
    its first token, `sql` unchanged; the pooled row may hide it, the adapter's row names it."""

    def tagged(rows: list[dict[str, Any]], slow: float) -> list[dict[str, Any]]:
        out = []
        for k, r in enumerate(rows):
            name = "chat" if k % 4 == 0 else "sql"
            if name == "chat" and slow != 1.0:
                r = {**r, "first_token_ns": int(r["first_token_ns"] * slow)}
                r["first_answer_ns"] = r["first_token_ns"]
            out.append({**r, "adapter": name})
        return out

    res = judge(tagged(reqs(B, 800, 0), 1.0), tagged(reqs(C, 800, 0, seed=1), 2.0))
    by = res.rows[res.rows["metric"] == "ttft_ms"]
    assert set(by["adapter"].dropna()) == {"chat", "sql"}
    chat = by[by["adapter"] == "chat"]
    assert chat["regression"].any() and "adapter chat" in res.reason
    assert not by[by["adapter"] == "sql"]["regression"].any()
