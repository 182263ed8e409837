"""A synthetic run stored in a real PostgreSQL, loaded back and summarised; numbers by hand."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import psycopg
import pytest
from rich.console import Console

from analysis.reports.summary import level_summary, summarize_run
from analysis.reports.summary_table import render_summary_table
from analysis.store import buckets, load, refs
from tests.analysis.storedata import (
    MS,
    T0,
    insert_run,
    level_row,
    request_row,
    run_row,
    streamed,
    tick_row,
)

RUN = "00000000-0000-0000-0000-00000000000a"


def _store_run(conn: psycopg.Connection[Any], run_id: str = RUN) -> None:
    reqs = [
        streamed(
            run_id,
            0,
            sent_ns=1 * MS,
            offsets_us=[40_000, 50_000, 70_000, 100_000, 250_000],
            tokens=[0, 1, 2, 1, 1],
            region="eu",
        ),
        streamed(
            run_id,
            1,
            sent_ns=0,
            offsets_us=[100_000, 300_000, 400_000],
            tokens=[1, 1, 1],
            first_answer_ns=300 * MS,
            region="eu",
        ),
        request_row(run_id, 2, outcome="http_error", http_status=429, end_ns=5 * MS, region="eu"),
        streamed(
            run_id,
            3,
            sent_ns=0,
            offsets_us=[10_000, 20_000],
            tokens=[1, 1],
            region="eu",
            phase="warmup",
        ),
        streamed(run_id, 4, sent_ns=0, offsets_us=[20_000], tokens=[1], region="us"),
        streamed(
            run_id, 5, sent_ns=0, offsets_us=[30_000, 40_000], tokens=[1, 1], region="us", level=1
        ),
    ]
    levels = [
        # steady windows [T0, T0 + 0.5 s) and [T0 + 0.5 s, T0 + 5.5 s)
        level_row(
            run_id,
            0,
            kind="rate",
            value=10.0,
            duration_s=2.5,
            warmup_s=1.0,
            cooldown_s=1.0,
            started_at=T0 - dt.timedelta(seconds=1),
        ),
        level_row(
            run_id,
            1,
            kind="concurrency",
            value=4.0,
            duration_s=5.0,
            started_at=T0 + dt.timedelta(milliseconds=500),
        ),
    ]
    ticks = [
        tick_row(
            run_id,
            s,
            region=r,
            shard_id=f"s-{r}",
            in_flight=2,
            completed=1,
            output_tokens=10,
            errors=int(s == 1),
        )
        for s in range(4)
        for r in ("eu", "us")
    ]
    slos = [{"metric": "ttft_ms", "percentile": 99, "threshold": 80}]
    insert_run(
        conn,
        run_row(
            run_id,
            spec={"name": "synthetic", "slos": slos},
            valid=False,
            invalid_reasons=["loop lag p99 3.1 ms > 2 ms"],
        ),
        levels,
        reqs,
        ticks,
    )


@pytest.mark.integration
def test_load_and_summarise(pg_conn: psycopg.Connection[Any]) -> None:
    _store_run(pg_conn)
    df = load.load_requests(pg_conn, RUN)
    assert len(df) == 6 and df["idx"].tolist() == [0, 1, 2, 3, 4, 5]
    assert df.loc[0, "chunk_offsets_us"].tolist() == [40_000, 50_000, 70_000, 100_000, 250_000]
    assert np.isnan(df.loc[2, "first_token_ns"])
    runs = load.load_runs(pg_conn)
    assert runs.loc[0, "requests"] == 6 and runs.loc[0, "errors"] == 1
    assert refs.resolve_run_id(pg_conn, RUN[:8]) == RUN
    assert refs.resolve_run_id(pg_conn, "synthetic") == RUN
    with pytest.raises(LookupError, match="no run matches 'nope'"):
        refs.resolve_run_id(pg_conn, "nope")

    s = summarize_run(pg_conn, RUN)
    json.dumps(s)  # JSON-safe
    assert s["run_id"] == RUN and s["valid"] is False
    assert s["invalid_reasons"] == ["loop lag p99 3.1 ms > 2 ms"]
    l0, l1 = s["levels"]
    assert (l0["requests_ok"], l0["requests_failed"]) == (4, 1)
    # window [T0, T0 + 0.5 s): tokens arrived A 5 (51..251 ms), B 2 (200, 400; not 500), the
    # warm-up request 2 (310, 320), E 1 (420) = 10; completed ok inside: A, warm-up, E = 3
    assert l0["steady_window_s"] == pytest.approx(0.5)
    assert l0["request_rate"] == pytest.approx(3 / 0.5)
    assert l0["output_tokens_per_s"] == pytest.approx(10 / 0.5)
    # TTFT from send: 50, 100, 20 -> p50 50; ITL per token 10 10 30 150 200 100 -> p50 65
    assert l0["ttft_ms"]["p50"] == 50.0 and l0["itl_ms"]["p50"] == 65.0
    assert l0["tpot_ms"]["p50"] == pytest.approx(100.0)  # 50 and 150; E has one token
    assert l0["e2e_ms"]["p90"] == pytest.approx(250 + 0.8 * 150)  # 20 250 400
    assert l0["ttfat_ms"]["p99"] == pytest.approx(50 + 0.98 * 250)  # 20 50 300
    assert l0["failures_by_kind"] == {"http_429": 1}
    # SLO TTFT <= 80: completed inside and meeting it: A, warm-up (10 ms), E -> 3 / 0.5 s;
    # attainment over the level's steady rows: A and E of A, B, the 429, E -> 2 / 4
    assert l0["goodput"] == pytest.approx(6.0) and l0["slo_attainment"] == 0.5
    assert l0["achieved"] == pytest.approx(5 / 0.5)  # level 0 requests sent inside / window
    assert l0["other_levels_in_flight_max"] == 0
    assert set(l0["regions"]) == {"eu", "us"}
    assert l0["regions"]["us"]["ttft_ms"]["p99"] == 20.0
    assert l0["regions"]["eu"]["requests_failed"] == 1
    # level 1: one request, 40 ms in flight over 5 s -> mean concurrency 0.008; B's last token
    # (500 ms) and its two arrived inside [0.5, 5.5) s; B and it completed there
    assert l1["kind"] == "concurrency" and l1["achieved"] == pytest.approx(0.04 / 5)
    assert l1["output_tokens_per_s"] == pytest.approx(3 / 5)
    assert l1["request_rate"] == pytest.approx(2 / 5)
    assert l1["itl_ms"] == {"p50": 10.0, "p90": 10.0, "p99": 10.0}

    text = _render(s)
    assert "INVALID" in text and "loop lag" in text


def _render(summary: dict[str, Any]) -> str:
    console = Console(width=200, record=True)
    console.print(render_summary_table(summary))
    return console.export_text()


@pytest.mark.integration
def test_timeseries_date_bin(pg_conn: psycopg.Connection[Any]) -> None:
    _store_run(pg_conn)
    assert buckets.bucket_function(pg_conn) == "date_bin"
    ts = buckets.timeseries(pg_conn, RUN, bucket_s=2.0)
    eu = ts[ts["region"] == "eu"].set_index("bucket")
    # ticks at T0+0..3 s, 2 s buckets: mean in flight 2; 10 tokens per second -> 10 tok/s
    tick_buckets = eu["in_flight"].dropna()
    assert tick_buckets.tolist() == [2.0, 2.0]
    assert eu.loc[T0, "output_tokens_per_s"] == 10.0
    assert eu.loc[T0, "errors_per_s"] == 0.5
    # requests: eu ok at T0 (A, B, warmup) ... completion = scheduled + end
    assert ts["ok_per_s"].sum() * 2 == 5 and ts["failed_per_s"].sum() * 2 == 1
    both = buckets.timeseries(pg_conn, RUN, bucket_s=1.0, by="none")
    assert set(both["region"]) == {"all"}
    assert both.loc[both["bucket"] == T0 + dt.timedelta(seconds=1), "errors_per_s"].item() == 2.0


def test_empty_level_summary_is_json_safe() -> None:
    from tests.analysis.storedata import frame

    df = frame([request_row(RUN, 0, outcome="not_sent", error_phase="run_ended", sent_ns=None)])
    import pandas as pd

    s = level_summary(df, pd.DataFrame([level_row(RUN)]), run_row(RUN))
    json.dumps(s)
    assert s["levels"][0]["ttft_ms"] == {"p50": None, "p90": None, "p99": None}
    assert "—" in _render(s)


def test_achieved_concurrency_counts_warmup_requests_in_flight() -> None:
    import datetime as dt

    import pandas as pd

    from tests.analysis.storedata import MS, frame, streamed

    # window [T0 + 2 s, T0 + 10 s]: A (warm-up) is in flight 0..5 s -> 3 s inside; B from 4 s
    # to 24 s -> 6 s inside; mean in flight (3 + 6) / 8
    rows = [
        streamed(
            RUN,
            0,
            sent_ns=0,
            offsets_us=[1000, 5_000_000],
            tokens=[1, 1],
            phase="warmup",
            scheduled_at=T0,
        ),
        streamed(
            RUN,
            1,
            sent_ns=0,
            offsets_us=[1000, 20_000_000],
            tokens=[1, 1],
            scheduled_at=T0 + dt.timedelta(seconds=4),
        ),
    ]
    lv = pd.DataFrame(
        [level_row(RUN, 0, kind="concurrency", value=2.0, duration_s=10.0, warmup_s=2.0)]
    )
    s = level_summary(frame(rows), lv, run_row(RUN))
    assert s["levels"][0]["achieved"] == pytest.approx(9 / 8)
    assert MS == 1_000_000


@pytest.mark.integration
@pytest.mark.parametrize("grid", ["dense", "sparse"])
@pytest.mark.parametrize("bucket_s", [0.25, 1.0, 7.0])
def test_completions_from_the_frame_are_the_stores_count(
    pg_conn: psycopg.Connection[Any], bucket_s: float, grid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """analysis.stats.throughput.completions (the charts of a stored run count ok/s and
    failed/s from its frame) gives the store's own count of timeseries(requests=True), bucket
    by bucket: end times at half microseconds (the store rounds them to even), requests never
    sent, failures, three regions and every region as one; counted on the grid of cells or,
    where it would be too long for the rows (`sparse`, forced here), on the cells seen."""
    from analysis.stats import throughput
    from analysis.stats.throughput import completions
    from analysis.store.fastload import load_requests_fast

    if grid == "sparse":
        monkeypatch.setattr(throughput, "DENSE_CELLS_PER_ROW", 0)
        monkeypatch.setattr(throughput, "DENSE_CELLS_MIN", 0)

    run_id = "00000000-0000-0000-0000-00000000c0de"
    rng = np.random.default_rng(7)
    reqs = []
    for i in range(400):
        end = None if i % 17 == 0 else int(rng.integers(0, 9_000_000_000)) + (500 * (i % 3 == 0))
        row = request_row(
            run_id,
            i,
            scheduled_at=T0 + dt.timedelta(microseconds=int(rng.integers(0, 20_000_000))),
            outcome="ok" if i % 5 else "http_error",
            end_ns=end,
            sent_ns=None if end is None else 0,
            region=["eu", "us-east", "ap"][i % 3],
        )
        reqs.append(row)
    insert_run(pg_conn, run_row(run_id), [level_row(run_id, 0)], reqs)
    df, _ = load_requests_fast(pg_conn, run_id)
    for by in ("region", "none"):
        stored = buckets.timeseries(pg_conn, run_id, bucket_s, by=by)  # type: ignore[arg-type]
        stored = stored[(stored["ok_per_s"] > 0) | (stored["failed_per_s"] > 0)]
        mine = completions(df, bucket_s, by=by)  # type: ignore[arg-type]
        assert len(mine) == len(stored) >= 4
        assert (mine["bucket"].to_numpy() == stored["bucket"].to_numpy()).all()
        assert mine["region"].tolist() == stored["region"].tolist()
        for col in ("ok_per_s", "failed_per_s"):
            assert mine[col].tolist() == stored[col].tolist()
        assert (
            buckets.timeseries(pg_conn, run_id, bucket_s, requests=False)["ok_per_s"] == 0
        ).all()
