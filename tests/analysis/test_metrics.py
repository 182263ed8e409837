"""Every metric on a hand-built frame, answers worked out by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import metrics as m
from tests.analysis.storedata import MS, T0, frame, request_row, streamed

RUN = "00000000-0000-0000-0000-000000000001"


def _rows() -> list[dict[str, object]]:
    return [
        # A: sent 1 ms late; role-only chunk at 40 ms, then 1 @50, 2 @70, 1 @100, 1 @250 (ms)
        streamed(
            RUN,
            0,
            sent_ns=1 * MS,
            offsets_us=[40_000, 50_000, 70_000, 100_000, 250_000],
            tokens=[0, 1, 2, 1, 1],
            usage_completion_tokens=5,
        ),
        # B: reasoning model: first token @100, first answer @300, tokens @300 and @400
        streamed(
            RUN,
            1,
            sent_ns=0,
            offsets_us=[100_000, 300_000, 400_000],
            tokens=[1, 1, 1],
            first_answer_ns=300 * MS,
            usage_completion_tokens=4,
        ),
        request_row(RUN, 2, outcome="http_error", http_status=429, end_ns=5 * MS),
        request_row(RUN, 3, outcome="timeout", error_phase="first_token", end_ns=60_000 * MS),
        # E: a one-token answer: no TPOT, no ITL
        streamed(RUN, 4, sent_ns=0, offsets_us=[20_000], tokens=[1]),
        request_row(RUN, 5, outcome="not_sent", error_phase="concurrency_cap", sent_ns=None),
    ]


def test_latencies_by_hand() -> None:
    df = frame(_rows())
    assert m.ttft_ms(df)[:2].tolist() == [50.0, 100.0]
    assert m.ttft_sched_ms(df)[:2].tolist() == [51.0, 100.0]
    assert m.ttfat_ms(df)[:2].tolist() == [50.0, 300.0]
    # A: (251 - 51) / (5 - 1) = 50; B: (400 - 100) / 2 = 150; E: one token -> NaN
    tpot = m.tpot_ms(df)
    assert tpot[:2].tolist() == [50.0, 150.0] and math.isnan(tpot[4])
    assert m.e2e_ms(df)[:2].tolist() == [250.0, 400.0]
    assert m.e2e_sched_ms(df)[:2].tolist() == [251.0, 400.0]
    # A: 4 tokens in 0.2 s = 20 tok/s; B: 2 in 0.3 s
    speed = m.output_speed_tps(df)
    assert speed[0] == pytest.approx(20.0) and speed[1] == pytest.approx(2 / 0.3)
    assert math.isnan(speed[4]) and math.isnan(m.ttft_ms(df)[5])


def test_itl_conventions() -> None:
    df = frame(_rows())
    ch = m.ChunkArrays.from_frame(df)
    # per chunk: A gaps 20, 30, 150; B gaps 200, 100 (role-only chunk skipped)
    assert m.itl_per_chunk_ms(ch).tolist() == [20.0, 30.0, 150.0, 200.0, 100.0]
    # per token: A's 2-token chunk after 20 ms gives 10, 10
    per_token = m.itl_per_token_ms(ch)
    assert per_token.tolist() == [10.0, 10.0, 30.0, 150.0, 200.0, 100.0]
    # sorted 10 10 30 100 150 200: p50 = (30 + 100) / 2; p90 at rank 4.5 = 175
    assert m.percentile(per_token, [50, 90]).tolist() == [65.0, 175.0]
    only_b = np.array([False, True, False, False, False, False])
    assert m.itl_per_token_ms(ch, only_b).tolist() == [200.0, 100.0]
    mx = m.max_itl_ms(ch)
    assert mx[0] == 150.0 and mx[1] == 200.0 and np.isnan(mx[2:]).all()


def _window(start_ms: int, end_ms: int) -> m.Window:
    t0 = int(T0.timestamp()) * 1_000_000_000
    return m.Window(t0 + start_ms * MS, t0 + end_ms * MS)


def test_throughput_counts_arrivals_and_completions_inside_the_window() -> None:
    rows = _rows()
    rows.append(
        streamed(RUN, 6, sent_ns=0, offsets_us=[10_000, 20_000], tokens=[1, 1], phase="warmup")
    )
    df = frame(rows)
    ch = m.ChunkArrays.from_frame(df)
    times = m.Timeline.from_frame(df)
    arr = m.Arrivals.of(ch, times)
    win = _window(60, 450)  # 0.39 s
    assert win.seconds == pytest.approx(0.39)
    # arrivals from T0 (ms): A 41(0) 51(1) 71(2) 101(1) 251(1); B 200 400 500; E 420; G 610 620.
    # inside [60, 450): A 2 + 1 + 1, B 1 + 1, E 1 = 7; the 2-token chunk counts both at 71 ms
    assert m.tokens_arrived(arr, win) == 7
    assert m.output_token_rate(arr, win) == pytest.approx(7 / 0.39)
    # a window's edge inside a chunk's arrival instant: [71, 101) has only the 2-token chunk
    assert m.tokens_arrived(arr, _window(71, 101)) == 2
    only_b = np.zeros(len(df), dtype=bool)
    only_b[1] = True
    assert m.tokens_arrived(arr, win, only_b) == 2
    # completed ok inside: A (ends 251) and E (420); B ends at 500, after the window
    assert m.request_rate(times, win) == pytest.approx(2 / 0.39)
    slos = [
        {"metric": "ttft_ms", "percentile": 99, "threshold": 80},
        {"metric": "itl_ms", "percentile": 99, "threshold": 160},
    ]
    # A meets both (TTFT 50, max ITL 150); B fails TTFT; E meets (no ITL value)
    assert m.meets_slos(df, slos)[:5].tolist() == [True, False, False, False, True]
    assert m.goodput(df, slos, times, win) == pytest.approx(2 / 0.39)
    assert m.goodput(df, [], times, win) == pytest.approx(m.request_rate(times, win))
    # in flight, [sent, end] overlaps with [60, 450) ms: A 60..251, B 100..450, E 400..420, and
    # the failures: #2 at 200..205, #3 from 300 on (a 60 s timeout): 191+350+20+5+150 ms
    assert m.in_flight_mean(times, win) == pytest.approx((191 + 350 + 20 + 5 + 150) / 390)
    assert m.in_flight_max(times, win) == 3  # at 400 ms: B, #3 and E
    assert m.request_rate(times, m.Window(5, 5)) != m.request_rate(times, m.Window(5, 5))  # NaN


def test_throughput_goodput_and_errors() -> None:
    rows = _rows()
    rows.append(
        streamed(RUN, 6, sent_ns=0, offsets_us=[10_000, 20_000], tokens=[1, 1], phase="warmup")
    )
    df = frame(rows)
    rates = m.error_rates(df)
    assert rates == {
        "http_429": {"count": 1, "rate": 1 / 7},
        "not_sent:concurrency_cap": {"count": 1, "rate": 1 / 7},
        "timeout:first_token": {"count": 1, "rate": 1 / 7},
    }


def test_token_agreement() -> None:
    agree = m.token_agreement(frame(_rows()))
    # A: usage 5 vs client 5; B: usage 4 vs client 3
    assert agree["n"] == 2 and agree["exact_fraction"] == 0.5
    assert agree["mean_abs_diff"] == 0.5 and agree["max_abs_diff"] == 1.0
    assert agree["mean_rel_diff"] == pytest.approx((0 + 0.25) / 2)


def test_unknown_metric_named() -> None:
    with pytest.raises(ValueError, match="unknown metric 'ttft'"):
        m.per_request_values(frame(_rows()), "ttft")


def _brute_itl(offs: list[list[int]], toks: list[list[int]], rows: list[bool]) -> list[float]:
    out: list[float] = []
    for o, t, keep in zip(offs, toks, rows, strict=True):
        if not keep:
            continue
        prev = None
        for oi, ti in zip(o, t, strict=True):
            if ti <= 0:
                continue
            if prev is not None:
                out += [(oi - prev) / ti / 1e3] * ti
            prev = oi
    return out


@pytest.mark.parametrize("zero_token_chunks", [False, True])
def test_itl_paths_match_brute_force(zero_token_chunks: bool) -> None:
    rng = np.random.default_rng(4)
    offs, toks = [], []
    for _ in range(300):
        n = int(rng.integers(0, 9))
        offs.append(np.cumsum(rng.integers(1, 5000, n)).tolist())
        low = 0 if zero_token_chunks else 1
        toks.append(rng.integers(low, 4, n).tolist())
    rows = (rng.random(300) < 0.7).tolist()
    ch = m.ChunkArrays.from_lists(offs, toks)
    got = m.itl_per_token_ms(ch, np.array(rows))
    assert got.tolist() == pytest.approx(_brute_itl(offs, toks, rows), rel=1e-12)
    g = m.chunk_gaps(ch, np.array(rows), labels=np.arange(300) % 7)
    assert set(np.unique(g.label).tolist()) <= set(range(7))


def test_tokens_arrived_equals_a_count_token_by_token() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(200):
        n = int(rng.integers(0, 12))
        offs = np.sort(rng.integers(0, 3_000_000, size=n)).tolist()  # µs from send
        toks = rng.integers(0, 4, size=n).tolist()
        if n and sum(toks) == 0:
            toks[-1] = 1
        if n:
            rows.append(
                streamed(RUN, i, sent_ns=int(rng.integers(0, 5 * MS)), offsets_us=offs, tokens=toks)
            )
        else:
            rows.append(request_row(RUN, i, outcome="not_sent", sent_ns=None))
    df = frame(rows)
    arr = m.Arrivals.of(m.ChunkArrays.from_frame(df), m.Timeline.from_frame(df))
    t0 = int(T0.timestamp()) * 1_000_000_000
    sched = m.epoch_ns(df["scheduled_at"])
    for _ in range(30):
        a, b = np.sort(rng.integers(0, 25_000, size=2))
        w = m.Window(t0 + int(a) * MS, t0 + int(b) * MS)
        want = 0
        for i, r in df.iterrows():
            if pd.isna(r["sent_ns"]):
                continue
            for off, k in zip(r["chunk_offsets_us"], r["chunk_tokens"], strict=True):
                at = int(sched[i]) + int(r["sent_ns"]) + int(off) * 1000
                want += int(k) if w.start_ns <= at < w.end_ns else 0
        assert m.tokens_arrived(arr, w) == want
