"""Frontier, Pareto set, knee and the highest load meeting the SLOs, on hand-built sweeps."""

from __future__ import annotations

import datetime as dt
import json

import pandas as pd
import pytest

from analysis.reports.summary import level_summary
from analysis.stats import frontier as fr
from analysis.verdicts import max_load
from tests.analysis.storedata import T0, frame, level_row, run_row, streamed

RUN = "00000000-0000-0000-0000-0000000000a7"


def test_pareto_frontier() -> None:
    pts = pd.DataFrame(
        {
            "name": list("ABCDE"),
            "output_tokens_per_s": [10, 20, 15, 30, 30],
            "latency": [100, 90, 200, 300, 250],
        }
    )
    # A is beaten by B (more throughput, less latency); C by B; D by E
    assert fr.pareto_frontier(pts)["name"].tolist() == ["B", "E"]


def test_knee_by_hand() -> None:
    # x_n = 0 .25 .5 .75 1; y_n = 0 .02 .04 .2 1; x_n - y_n largest (0.55) at x = 4
    assert fr.knee([1, 2, 3, 4, 5], [10, 11, 12, 20, 60]) == 3
    assert fr.knee([5, 1, 3, 4, 2], [60, 10, 12, 20, 11]) == 3  # unsorted input: same point
    assert fr.knee([1, 2], [1, 2]) is None
    assert fr.knee([1, 2, 3], [5, 5, 5]) is None
    assert fr.knee([1, 2, 3], [1, 4, 5]) is None  # concave: never below the diagonal


def _sweep() -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, i = [], 0
    for level, slow_every in ((0, 0), (1, 0), (2, 5)):
        for j in range(500):
            first = 2_000_000 if slow_every and j % slow_every == 0 else 100_000
            rows.append(
                streamed(
                    RUN,
                    i,
                    sent_ns=0,
                    offsets_us=[first, first + 20_000],
                    tokens=[1, 1],
                    level=level,
                    scheduled_at=T0 + dt.timedelta(seconds=60 * level + 0.1 * j),
                )
            )
            i += 1
    # each level's steady window [origin + 0.1 s, origin + 50.1 s): 50 s holding every fast
    # request's completion (0.12 + 0.1 j s) and both its tokens
    levels = pd.DataFrame(
        [
            level_row(
                RUN,
                lv,
                value=v,
                duration_s=50.1,
                warmup_s=0.1,
                started_at=T0 + dt.timedelta(seconds=60 * lv),
            )
            for lv, v in ((0, 5.0), (1, 10.0), (2, 20.0))
        ]
    )
    return frame(rows), levels


def test_points_and_max_load() -> None:
    df, levels = _sweep()
    pts = fr.frontier_points(df, levels, metric="ttft_ms", percentile=99, resamples=200)
    # 500 completions / 50 s; at level 2 the slow requests 485, 490 and 495 end (and send both
    # tokens) after the window, at 2.02 + 0.1 j s: 497 and 994 inside
    assert pts["request_rate"].tolist() == pytest.approx([10.0, 10.0, 497 / 50])
    assert pts["output_tokens_per_s"].tolist() == pytest.approx([20.0, 20.0, 994 / 50])
    assert pts["latency"].tolist()[:2] == [100.0, 100.0]
    assert pts["latency"].iloc[2] == 2000.0  # 20% slow: p99 is slow
    slos = [{"metric": "ttft_ms", "percentile": 99, "threshold": 800}]
    best = max_load.max_load_meeting_slos(df, levels, slos)
    # 500 samples, no exceedance: passes (>= 459); level 2 has 100 exceedances: fails
    assert (best["max_value"], best["next_value"], best["next_verdict"]) == (10.0, 20.0, "fail")
    loose = max_load.max_load_meeting_slos(
        df, levels, [{"metric": "ttft_ms", "percentile": 99, "threshold": 5000}]
    )
    assert (loose["max_value"], loose["next_value"]) == (20.0, None)  # every level passes
    strict = max_load.max_load_meeting_slos(
        df, levels, [{"metric": "ttft_ms", "percentile": 99.9, "threshold": 800}]
    )
    assert strict["max_value"] is None and strict["next_verdict"] == "insufficient samples"
    itl = fr.frontier_points(df, levels, metric="itl_ms", percentile=50, resamples=50)
    assert itl["latency"].tolist() == pytest.approx([20.0, 20.0, 20.0])


def test_a_levels_fail_in_max_load_survives_holm_over_its_claims() -> None:
    """Level 2: 100 of 500 requests over 800 ms. "p83 < 800" alone is disproved at 95 %
    (P(Bin(500, 0.17) >= 100) = 0.044); beside a second claim Holm asks for 0.025, so the next
    level up is undecided, as the exit verdict would judge it."""
    df, levels = _sweep()
    tight = {"metric": "ttft_ms", "percentile": 83, "threshold": 800}
    alone = max_load.max_load_meeting_slos(df, levels, [tight], confidence=0.95)
    assert (alone["max_value"], alone["next_verdict"]) == (10.0, "fail")
    loose = {"metric": "ttft_ms", "percentile": 50, "threshold": 5000}
    both = max_load.max_load_meeting_slos(df, levels, [tight, loose], confidence=0.95)
    assert (both["max_value"], both["next_verdict"]) == (10.0, "insufficient samples")
    assert both["levels"][2]["claims"][0]["fail_held"] is True


def test_the_summary_s_rates_give_the_same_points_without_the_chunk_arrays() -> None:
    """The throughput a run's kept summary holds is the frontier's own definition: points built
    on it equal those counted from the arrivals, with no chunk array behind the frame (a
    frame without them fails where it would have to count), and a level the summary lacks
    is counted."""
    df, levels = _sweep()
    counted = fr.frontier_points(df, levels, metric="ttft_ms", percentile=99, resamples=50)
    summary = json.loads(json.dumps(level_summary(df, levels, run_row(RUN))))  # as kept
    rates = fr.summary_rates(summary)
    assert sorted(rates) == [0, 1, 2]
    bare = df.drop(columns=["chunk_offsets_us", "chunk_tokens"])
    kept = fr.frontier_points(
        bare, levels, metric="ttft_ms", percentile=99, resamples=50, rates=rates
    )
    pd.testing.assert_frame_equal(kept, counted)
    with pytest.raises(KeyError):
        fr.frontier_points(bare, levels, metric="ttft_ms", percentile=99, resamples=50)
    partly = {k: v for k, v in rates.items() if k != 2}
    mixed = fr.frontier_points(
        df, levels, metric="ttft_ms", percentile=99, resamples=50, rates=partly
    )
    pd.testing.assert_frame_equal(mixed, counted)
