"""A chart's throughput is the table's: tokens/s per time bucket (analysis.stats.throughput) summed
over the buckets of a level's steady window equal the summary table's output tokens/s for that
level (analysis.metrics.output_token_rate), per region and pooled, on requests whose tokens
arrive across bucket and window edges, a failed one's partial tokens included."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as m
from analysis.reports.summary import level_summary
from analysis.stats import throughput
from tests.analysis.storedata import T0, frame, level_row, request_row, run_row

RUN = "00000000-0000-0000-0000-00000000a23a"
START, END = T0 + dt.timedelta(seconds=2), T0 + dt.timedelta(seconds=6)


def _run() -> tuple[pd.DataFrame, m.ChunkArrays]:
    rng = np.random.default_rng(23)
    rows = []
    for i in range(60):
        n = int(rng.integers(1, 40))
        offsets = np.sort(rng.integers(50_000, 3_000_000, size=n)).tolist()
        tokens = rng.integers(1, 4, size=n).tolist()
        failed = i % 13 == 0  # a failed stream's partial tokens were produced too
        rows.append(
            request_row(
                RUN,
                i,
                region="eu" if i % 3 else "us",
                sent_ns=int(rng.integers(0, 5_000_000)),
                first_token_ns=offsets[0] * 1000,
                end_ns=offsets[-1] * 1000 + 1_000_000,
                outcome="error" if failed else "ok",
                error_phase="stream" if failed else None,
                output_tokens=sum(tokens),
                client_tokens=sum(tokens),
                chunk_offsets_us=offsets,
                chunk_tokens=tokens,
            )
        )
    df = frame(rows)
    return df, m.ChunkArrays.from_lists(df["chunk_offsets_us"], df["chunk_tokens"])


def _chart_rate(chart: pd.DataFrame, region: str | None) -> float:
    """The chart's tokens/s over the steady window: its buckets inside it, back to tokens."""
    inside = chart[(chart["bucket"] >= START) & (chart["bucket"] < END)]
    if region is not None:
        inside = inside[inside["region"] == region]
    return float(inside["output_tokens_per_s"].sum() * 0.5) / (END - START).total_seconds()


def test_a_charts_tokens_per_s_over_a_window_is_the_tables() -> None:
    df, chunks = _run()
    levels = pd.DataFrame([level_row(RUN, steady_start=START, steady_end=END)])
    table = level_summary(df, levels, run_row(RUN), chunks=chunks)["levels"][0]
    chart = throughput.arrival_throughput(df, chunks, 0.5)
    assert sum(_chart_rate(chart, r) for r in ("eu", "us")) == pytest.approx(
        table["output_tokens_per_s"], rel=1e-12
    )
    assert set(table["regions"]) == {"eu", "us"}
    for region, entry in table["regions"].items():
        assert _chart_rate(chart, region) == pytest.approx(entry["output_tokens_per_s"], rel=1e-12)
    pooled = throughput.arrival_throughput(df, chunks, 0.5, by="none")
    assert set(pooled["region"]) == {"all"}
    assert _chart_rate(pooled, "all") == pytest.approx(table["output_tokens_per_s"], rel=1e-12)
    # the data tell arrival from completion apart: counted at completion, the window differs
    times = m.Timeline.from_frame(df)
    win = m.Window(int(START.timestamp() * 1e9), int(END.timestamp() * 1e9))
    at_end = (times.end_at >= win.start_ns) & (times.end_at < win.end_ns)
    by_completion = float(df.loc[at_end, "output_tokens"].sum()) / win.seconds
    assert by_completion != pytest.approx(table["output_tokens_per_s"], rel=1e-3)


def test_every_token_is_in_one_bucket_and_each_bucket_is_tokens_arrived() -> None:
    df, chunks = _run()
    arr = m.Arrivals.of(chunks, m.Timeline.from_frame(df))
    everyone = np.ones(len(df), dtype=bool)
    for bucket_ns in (250_000_000, 1_000_000_000, 7_000_000_000):
        got = throughput.tokens_by_bucket(arr, bucket_ns, everyone)
        assert sum(got.values()) == int(chunks.tokens.sum())
        for k, tokens in got.items():
            window = m.Window(k * bucket_ns, (k + 1) * bucket_ns)
            assert tokens == m.tokens_arrived(arr, window, everyone)


def test_the_timeseries_takes_the_arrival_count_in_place_of_the_ticks() -> None:
    df, chunks = _run()
    ticks = pd.DataFrame(
        {
            "bucket": [pd.Timestamp(T0), pd.Timestamp(T0) + pd.Timedelta(seconds=30)],
            "region": ["eu", "eu"],
            "in_flight": [3.0, 0.0],
            "output_tokens_per_s": [999.0, 999.0],  # the shards' live count: replaced
            "ok_per_s": [1.0, 0.0],
            "failed_per_s": [0.0, 0.0],
        }
    )
    out = throughput.with_arrival_throughput(ticks, df, chunks, 1.0)
    arrived = throughput.arrival_throughput(df, chunks, 1.0)
    late = out[out["bucket"] == pd.Timestamp(T0) + pd.Timedelta(seconds=30)]
    assert late["output_tokens_per_s"].tolist() == [0.0]  # no token arrived then
    merged = out.merge(arrived, on=["bucket", "region"], suffixes=("", "_arrived"))
    assert len(merged) == len(arrived)
    assert (merged["output_tokens_per_s"] == merged["output_tokens_per_s_arrived"]).all()
    assert (out["ok_per_s"].notna() & out["failed_per_s"].notna()).all()


def test_no_tick_or_no_token_is_an_empty_side_not_an_error() -> None:
    df, chunks = _run()
    cols = ["bucket", "region", "in_flight", "output_tokens_per_s", "ok_per_s", "failed_per_s"]
    no_ticks = pd.DataFrame(columns=cols)  # a run killed before its first tick
    out = throughput.with_arrival_throughput(no_ticks, df, chunks, 1.0)
    assert out["output_tokens_per_s"].sum() == float(chunks.tokens.sum())
    silent = frame([request_row(RUN, 0, outcome="error", error_phase="connect", sent_ns=None)])
    none = m.ChunkArrays.from_lists(silent["chunk_offsets_us"], silent["chunk_tokens"])
    # no token arrived, but the request failed in a bucket: a row counts it, as the store would
    out = throughput.with_arrival_throughput(no_ticks, silent, none, 1.0)
    assert out[["output_tokens_per_s", "ok_per_s", "failed_per_s"]].values.tolist() == [
        [0.0, 0.0, 1.0]
    ]
    assert throughput.with_arrival_throughput(no_ticks, silent.iloc[0:0], none, 1.0).empty


@pytest.mark.parametrize("dense", [True, False])
def test_each_group_counts_what_its_own_requests_alone_would(
    dense: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tokens_by_group_bucket counts every region at once, in one array of (region, bucket)
    cells or (dense=False) per distinct cell; each region's buckets are tokens_by_bucket over
    its own requests, a bucket reached only by chunks without tokens included."""
    if not dense:
        monkeypatch.setattr(throughput, "DENSE_CELLS", 0)
    df, chunks = _run()
    chunks.tokens[chunks.ptr[5] : chunks.ptr[6]] = 0  # a request whose chunks carry no token
    arr = m.Arrivals.of(chunks, m.Timeline.from_frame(df))
    region = df["region"].astype(object).to_numpy()
    group = (region == "us").astype(np.int64)
    some = np.arange(len(df)) % 7 != 3
    for bucket_ns in (100_000_000, 1_000_000_000, 3_000_000_000):
        got = throughput.tokens_by_group_bucket(arr, bucket_ns, some, group)
        assert list(got) == sorted(got)
        for g, name in enumerate(("eu", "us")):
            alone = throughput.tokens_by_bucket(arr, bucket_ns, some & (region == name))
            assert {k: t for (gg, k), t in got.items() if gg == g} == alone
    assert 0 in throughput.tokens_by_bucket(arr, 100_000_000, np.arange(len(df)) == 5).values()


@pytest.mark.parametrize("max_chunks", [throughput.MAX_CHUNKS, 7])
@pytest.mark.parametrize("way", ["by-chunk", "by-bisection"])
def test_each_bucket_holds_the_tokens_of_the_chunks_that_arrived_in_it(
    max_chunks: int, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against every chunk placed one by one, both ways of counting the requests that cross an
    edge: buckets far shorter than a request (most of them empty inside it), chunks on a
    bucket's very edge and 1 µs before one, requests without chunks or tokens, a run taken in
    parts of a few chunks."""
    monkeypatch.setattr(throughput, "MAX_CHUNKS", max_chunks)
    # bisection is taken when edges * BISECT_EDGES_PER_CHUNK + span / 4 < chunks: never, always
    factor = 10**9 if way == "by-chunk" else -(10**9)
    monkeypatch.setattr(throughput, "BISECT_EDGES_PER_CHUNK", factor)
    rng = np.random.default_rng(5)
    offsets, tokens, sent = [], [], []
    for i in range(300):
        n = int(rng.integers(0, 12))
        offs = rng.integers(0, 2_000_000, size=n)
        if i % 5 < 2 and n:  # a chunk on an edge of 10 ms buckets, or 1 µs before one
            offs[0] = 10_000 * int(rng.integers(1, 150)) - i % 5
        offs = np.sort(offs)  # chunks are stored in arrival order
        offsets.append(offs.tolist())
        tokens.append((rng.integers(0, 3, size=n) * (i % 9 != 0)).tolist())
        sent.append(int(rng.integers(0, 50)) * 10_000_000 + int(rng.integers(0, 4)) * 400)
    chunks = m.ChunkArrays.from_lists(offsets, tokens)
    sent_at = np.array(sent, dtype=np.int64)
    everyone = np.ones(len(sent), dtype=bool)
    arr = m.Arrivals.of(chunks, m.Timeline(sent_at, sent_at, everyone, everyone))
    group = np.arange(len(sent), dtype=np.int64) % 3
    rows = np.arange(len(sent)) % 4 != 1
    for bucket_ns in (10_000_000, 37_000_000, 1_000_000_000):
        want: dict[tuple[int, int], int] = {}
        for r in np.flatnonzero(rows):
            for off, tok in zip(offsets[r], tokens[r], strict=True):
                key = (int(group[r]), (int(sent_at[r]) + off * 1000) // bucket_ns)
                want[key] = want.get(key, 0) + tok
        got = throughput.tokens_by_group_bucket(arr, bucket_ns, rows, group)
        assert got == dict(sorted(want.items()))
