"""Comparisons (bootstrap CI of the difference, one-sided tests under Holm, threshold) and
nightly change points on synthetic series with known answers."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.verdicts import compare, nightly
from tests.analysis.storedata import frame, insert_run, level_row, request_row, run_row, streamed


def test_regression_detected_and_noise_not() -> None:
    rng = np.random.default_rng(5)
    base = rng.lognormal(4.0, 0.3, 3000)
    same = rng.lognormal(4.0, 0.3, 3000)
    slower = rng.lognormal(4.0, 0.3, 3000) * 1.2
    noise = compare.compare_samples(base, same, threshold_pct=5)
    assert not any(r["regression"] or r["improvement"] for r in noise)
    assert all(r["ci_lower"] < 0 < r["ci_upper"] for r in noise)
    worse = compare.compare_samples(base, slower, threshold_pct=5)
    assert all(r["regression"] for r in worse)
    assert worse[0]["delta_pct"] == pytest.approx(20.0, abs=4.0) and worse[0]["p_adjusted"] < 1e-6
    # a 20% slowdown is not a regression under a 30% threshold
    assert not any(r["regression"] for r in compare.compare_samples(base, slower, threshold_pct=30))
    better = compare.compare_samples(slower, base, threshold_pct=5)
    assert all(r["improvement"] and not r["regression"] for r in better)


def test_small_samples_are_not_significant() -> None:
    # three samples each: a 20% change in the median cannot be told from noise
    rows = compare.compare_samples(
        np.array([100.0, 90.0, 110.0]), np.array([120.0, 108.0, 132.0]), [50.0]
    )
    assert rows[0]["delta_pct"] == pytest.approx(20.0) and not rows[0]["regression"]


def test_compare_runs_by_level() -> None:
    def run(run_id: str, scale: float) -> Any:
        rng = np.random.default_rng(int(scale * 10))
        return frame(
            [
                streamed(
                    run_id,
                    i,
                    sent_ns=0,
                    offsets_us=[int(scale * rng.gamma(9, 10_000)), 900_000],
                    tokens=[1, 1],
                )
                for i in range(800)
            ]
        )

    table = compare.compare_runs(run("b", 1.0), run("c", 1.5), metrics=("ttft_ms", "itl_ms"))
    ttft = table[table["metric"] == "ttft_ms"]
    assert ttft["regression"].all() and set(ttft["level"]) == {0}
    # ITL = 900 ms - TTFT: it got shorter (by 3-6%, near the 5% threshold): never a regression
    itl = table[table["metric"] == "itl_ms"]
    assert (itl["delta"] < 0).all() and not itl["regression"].any()
    assert compare.label_differences(
        {"model": "a", "labels": {"engine": "vllm"}}, {"model": "a", "labels": {"engine": "sglang"}}
    ) == {"labels.engine": ("vllm", "sglang")}


def test_several_candidates_at_once_give_each_ones_own_table() -> None:
    """compare_many samples and resamples the baseline once for all candidates: every table
    equals the one compare_runs makes for that candidate alone, row for row, p for p."""

    def run(run_id: str, scale: float, seed: int) -> Any:
        rng = np.random.default_rng(seed)
        return frame(
            [
                streamed(
                    run_id,
                    i,
                    sent_ns=0,
                    offsets_us=[int(scale * rng.gamma(9, 10_000)), 900_000, 950_000],
                    tokens=[1, 2, 1],
                )
                for i in range(400)
            ]
        )

    base = run("b", 1.0, 1)
    cands = [run("c1", 1.0, 2), run("c2", 1.3, 3), run("c3", 0.9, 4)]
    metrics = ("ttft_ms", "itl_ms", "e2e_ms")
    many = compare.compare_many(base, cands, metrics=metrics, resamples=200)
    assert len(many) == len(cands)
    for cand, got in zip(cands, many, strict=True):
        alone = compare.compare_runs(base, cand, metrics=metrics, resamples=200)
        pd.testing.assert_frame_equal(got, alone)
    slower = many[1][(many[1]["metric"] == "ttft_ms") & (many[1]["percentile"] < 99)]
    assert len(slower) == 2 and slower["regression"].all()  # p99: 4 requests beyond, untested
    assert not many[0]["regression"].any()


@pytest.mark.parametrize(
    ("means", "expected"),
    [((10.0, 15.0, 9.0), [20, 40]), ((10.0,), []), ((10.0, 10.3), [])],
)
def test_change_points_known(means: tuple[float, ...], expected: list[int]) -> None:
    rng = np.random.default_rng(11)
    x = np.concatenate([mu + rng.normal(0, 0.5, 20) for mu in means])
    assert nightly.change_points(x) == expected


def test_change_points_single_step_position() -> None:
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(100, 2, 35), rng.normal(112, 2, 15)]
    assert nightly.change_points(x) == [35]
    with pytest.raises(ValueError, match="finite"):
        nightly.change_points([1.0, np.nan, 2.0, 3.0, 4.0, 5.0])


def test_change_points_ignore_a_periodic_wiggle() -> None:
    # a 5-night pattern: first differences take two values (+2 and -3), so a MAD of them is 0;
    # the noise must still be seen as noise, and only the step found
    wiggle = np.array([(k * 7) % 5 for k in range(14)], dtype=np.float64)
    assert nightly.noise_sigma(wiggle) == pytest.approx(2.0 / (0.6745 * np.sqrt(2.0)))
    assert nightly.change_points(100 + wiggle) == []
    assert nightly.change_points(100 + wiggle + np.r_[np.zeros(8), np.full(6, 80.0)]) == [8]
    # quantized: most differences are exactly 0, the mean absolute difference sets the noise
    q = np.r_[np.full(10, 100.0), 100.5, np.full(5, 100.0)]
    assert nightly.noise_sigma(q) == pytest.approx(1.0 / 15 * np.sqrt(np.pi) / 2)


@pytest.mark.integration
def test_schedule_history_from_store(pg_conn: psycopg.Connection[Any]) -> None:
    t0 = dt.datetime(2026, 10, 1, 2, 0, tzinfo=dt.UTC)
    ttfts = [100] * 8 + [180] * 8  # ms; a regression lands on night 8
    for night, ttft in enumerate(ttfts):
        rid = f"00000000-0000-0000-0001-{night:012d}"
        reqs = [
            streamed(
                rid, i, sent_ns=0, offsets_us=[1000 * (ttft + i % 5), 1000 * 999], tokens=[1, 1]
            )
            for i in range(50)
        ]
        insert_run(
            pg_conn,
            run_row(
                rid,
                name=f"nightly {night}",
                schedule_name="nightly",
                created_at=t0 + dt.timedelta(days=night),
            ),
            [level_row(rid)],
            reqs,
        )
    hist, cps = nightly.history_with_changes(pg_conn, "nightly", metric="ttft_ms", percentile=50)
    assert hist["value"].tolist() == [102.0] * 8 + [182.0] * 8  # per-run medians, linear
    assert cps == [8] and hist["segment"].tolist() == [0.0] * 8 + [1.0] * 8
    # percentile_cont is numpy's linear interpolation
    p99 = nightly.schedule_history(pg_conn, "nightly", metric="ttft_ms", percentile=99)
    ref = np.percentile([100 + i % 5 for i in range(50)], 99)
    assert p99["value"].iloc[0] == pytest.approx(ref, rel=1e-12)
    with pytest.raises(ValueError, match="unknown metric"):
        nightly.schedule_history(pg_conn, "nightly", metric="itl")


@pytest.mark.integration
def test_schedule_names_are_every_schedule_in_code_point_order(
    pg_conn: psycopg.Connection[Any],
) -> None:
    """What the Nightly page and `peakload nightly` list: each schedule once, however old its
    runs (the page read the newest 5,000 runs, counting each one's requests, for these names)."""
    t0 = dt.datetime(2026, 10, 1, 2, 0, tzinfo=dt.UTC)
    for i, schedule in enumerate(["nightly-b", "Nightly-A", None, "nightly-b", "alpha"]):
        rid = f"00000000-0000-0000-0002-{i:012d}"
        row = run_row(rid, name=f"r{i}", schedule_name=schedule, created_at=t0 + dt.timedelta(i))
        insert_run(pg_conn, row, [level_row(rid)])
    assert nightly.schedule_names(pg_conn) == ["Nightly-A", "alpha", "nightly-b"]


@pytest.mark.integration
def test_compare_cli_exit_codes(
    pg_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from ui.commands.compare import compare_command

    for k, (rid, scale) in enumerate(
        (
            ("00000000-0000-0000-0002-000000000001", 1.0),
            ("00000000-0000-0000-0002-000000000002", 1.0),
            ("00000000-0000-0000-0002-000000000003", 2.0),
        )
    ):
        rng = np.random.default_rng(k)
        reqs = [
            streamed(
                rid,
                i,
                sent_ns=0,
                offsets_us=[int(scale * rng.gamma(9, 10_000)), 2_000_000],
                tokens=[1, 1],
            )
            for i in range(400)
        ]
        insert_run(pg_conn, run_row(rid, name=f"cmp{k}"), [level_row(rid)], reqs)
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", pg_conn.peakload_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("COLUMNS", "220")
    runner = CliRunner()
    same = runner.invoke(compare_command, ["cmp0", "cmp1", "--metric", "ttft_ms"])
    assert same.exit_code == 0, same.output
    worse = runner.invoke(compare_command, ["cmp0", "cmp2", "--metric", "ttft_ms"])
    assert worse.exit_code == 1 and "REGRESSION" in worse.output
    assert runner.invoke(compare_command, ["cmp0", "nope"]).exit_code == 6

    # the candidate: 11 of 18 failed; ok ones as fast: "ok" rows and exit 0 before
    def failing(rid: str) -> list[dict[str, Any]]:
        ok = [
            streamed(rid, i, sent_ns=0, offsets_us=[90_000, 2_000_000], tokens=[1, 1])
            for i in range(7)
        ]
        return ok + [
            request_row(rid, 7 + i, outcome="http_error", http_status=429) for i in range(11)
        ]

    rid = "00000000-0000-0000-0002-000000000004"
    insert_run(pg_conn, run_row(rid, name="cmp-fail"), [level_row(rid)], failing(rid))
    failed = runner.invoke(compare_command, ["cmp0", "cmp-fail", "--json"])
    assert failed.exit_code == 1, failed.output
    out = json.loads(failed.output)
    assert "error_rate at rate 10" in out["reason"]
    rid = "00000000-0000-0000-0002-000000000005"
    insert_run(pg_conn, run_row(rid, name="cmp-inv", valid=False), [level_row(rid)], failing(rid))
    inv = runner.invoke(compare_command, ["cmp0", "cmp-inv"])
    assert inv.exit_code == 7 and "cannot compare" in inv.output
