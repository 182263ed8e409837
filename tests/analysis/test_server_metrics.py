"""analysis.stats.server_metrics without a store: role mapping (preset selectors, label matching),
bucketing of gauges and histogram deltas, per-level stats, and the diagnosis rules."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analysis.stats import server_diagnosis, server_split
from analysis.stats import server_metrics as sm

T0 = pd.Timestamp("2026-12-01 10:00:00", tz="UTC")


def _samples(rows: list[tuple[float, str, dict[str, str], float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [(T0 + pd.Timedelta(seconds=t), n, lab, v) for t, n, lab, v in rows],
        columns=["t", "name", "labels", "value"],
    )


def test_gauges_summed_over_label_sets_and_selector_labels_respected() -> None:
    s = _samples(
        [
            (0.2, "vllm:num_requests_waiting", {"model": "a"}, 2.0),
            (0.2, "vllm:num_requests_waiting", {"model": "b"}, 3.0),
            (1.2, "vllm:num_requests_waiting", {"model": "a"}, 4.0),
            (0.2, "trt{x}", {"request_type": "waiting"}, 7.0),
            (0.2, "trt{x}", {"request_type": "running"}, 9.0),
        ]
    )
    series = sm.role_series(s, {"queue": ["vllm:num_requests_waiting"]})
    assert series["value"].tolist() == [5.0, 4.0]
    sel = sm.role_series(
        s.assign(name=s["name"].str.replace("trt{x}", "trt")),
        {"running": ['trt{request_type="running"}']},
    )
    assert sel["value"].tolist() == [9.0]


def test_histogram_means_from_deltas_per_bucket() -> None:
    name = "vllm:request_queue_time_seconds"
    s = _samples(
        [
            (0.5, name + "_sum", {}, 1.0),
            (0.5, name + "_count", {}, 10.0),
            (1.5, name + "_sum", {}, 3.0),  # +2 s over +4 requests: 500 ms each
            (1.5, name + "_count", {}, 14.0),
            (2.5, name + "_sum", {}, 3.0),  # no request: unknown, not zero
            (2.5, name + "_count", {}, 14.0),
        ]
    )
    series = sm.role_series(s, {"queue_time_histogram": [name]})
    b = sm.bucketed(series, 1.0)
    assert b["server_queue_ms"].tolist()[0] == pytest.approx(500.0)
    assert pd.isna(b["server_queue_ms"].tolist()[1])
    stats = sm.level_server_stats(series, {0: (T0, T0 + pd.Timedelta(seconds=3))})
    assert stats[0]["server_queue_ms"] == pytest.approx(2.0 / 4 * 1e3)


def _lv(level: int, value: float, ttft: float, tpot: float) -> dict[str, object]:
    return {"level": level, "value": value, "ttft_ms": {"p50": ttft}, "tpot_ms": {"p50": tpot}}


def test_diagnosis_admission_decoding_neither() -> None:
    levels = [_lv(0, 4, 60, 26), _lv(1, 16, 160, 44), _lv(2, 48, 2300, 45)]
    server = {0: {"queue_mean": 0.0}, 1: {"queue_mean": 0.4}, 2: {"queue_mean": 31.5}}
    d = server_diagnosis.diagnose(levels, server)
    assert d["verdict"] == "admission"
    assert d["numbers"]["ttft_ratio"] == pytest.approx(2300 / 160)
    assert "160 -> 2300 ms" in d["sentence"] and "0.4 -> 31.5" in d["sentence"]
    dec = server_diagnosis.diagnose(
        [_lv(0, 4, 60, 20), _lv(1, 8, 70, 40)], {0: {"queue_mean": 0.0}, 1: {"queue_mean": 0.2}}
    )
    assert dec["verdict"] == "decoding"
    flat = server_diagnosis.diagnose(
        [_lv(0, 1, 60, 20), _lv(1, 2, 61, 21)], {0: {"queue_mean": 0.0}, 1: {"queue_mean": 0.0}}
    )
    assert flat["verdict"] == "neither"
    both = server_diagnosis.diagnose(
        [_lv(0, 1, 60, 20), _lv(1, 2, 200, 40)], {0: {"queue_mean": 0.0}, 1: {"queue_mean": 5.0}}
    )
    assert both["verdict"] == "both"
    assert server_diagnosis.diagnose(levels, {})["verdict"] == "unknown"
    assert server_diagnosis.diagnose(levels[:1], server)["verdict"] == "unknown"


def test_diagnosis_from_a_zero_p50_names_growth_without_dividing_by_it() -> None:
    """A level whose typical request the client read whole in one go has a p50 TPOT of 0 ms (a
    loaded CPU engine, seen with vLLM at 4 streams): it grew from nothing, or stayed flat. Before,
    `peakload run` ended in a ZeroDivisionError while summarising such a sweep."""
    queue = {0: {"queue_mean": 0.0}, 1: {"queue_mean": 6.0}}
    still_zero = server_diagnosis.diagnose([_lv(0, 4, 60, 0.0), _lv(1, 8, 400, 0.0)], queue)
    assert still_zero["verdict"] == "admission"
    assert still_zero["numbers"]["tpot_ratio"] == 1.0
    no_queue = {0: {"queue_mean": 0.0}, 1: {"queue_mean": 0.0}}
    grew = server_diagnosis.diagnose([_lv(0, 4, 60, 0.0), _lv(1, 8, 62, 3.0)], no_queue)
    assert grew["verdict"] == "decoding"
    assert grew["numbers"]["tpot_ratio"] is None  # no finite ratio, and the JSON stays strict
    assert "0.0 -> 3.0 ms (up from 0)" in grew["sentence"]
    json.dumps(grew, allow_nan=False)


def test_preset_selector_goes_first() -> None:
    names = sm.metric_names({"target": {}})
    assert names["queue"][0] == "peakload_sim:num_requests_waiting"
    vllm = sm.metric_names({"target": {"preset": "vllm"}})
    assert vllm["kv_cache"][0] == "vllm:kv_cache_usage_perc"
    assert vllm["queue_time_histogram"][0] == "vllm:request_queue_time_seconds"
    triton = sm.metric_names({"target": {"preset": "triton"}})
    assert triton["running"][0] == 'nv_trt_llm_request_metrics{request_type="active"}'


VLLM = """# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:num_requests_running{engine="0",model_name="m"} 16.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} %s
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} %s
"""


def test_a_vllm_exposition_through_the_preset_names() -> None:
    from loadgen.targets.prometheus import parse_exposition

    t0 = int(T0.value)
    samples = parse_exposition(VLLM % (10.0, 100), t0) + parse_exposition(
        VLLM % (16.0, 110), t0 + 1_000_000_000
    )
    frame = pd.DataFrame(
        [(pd.Timestamp(s.t_ns, tz="UTC"), s.name, s.labels, s.value) for s in samples],
        columns=["t", "name", "labels", "value"],
    )
    series = sm.role_series(frame, sm.metric_names({"target": {"preset": "vllm"}}))
    stats = sm.level_server_stats(series, {0: (T0, T0 + pd.Timedelta(seconds=2))})[0]
    assert (stats["queue_mean"], stats["running_mean"], stats["kv_cache_mean"]) == (7, 16, 0.42)
    assert stats["server_queue_ms"] == pytest.approx(6.0 / 10 * 1e3)  # 6 s over 10 requests


def _requests(level: int, queue: list[float | None], prefill: list[float | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "level": level,
            "outcome": "ok",
            "phase": "steady",
            "server_queue_ms": [float("nan") if q is None else q for q in queue],
            "server_prefill_ms": [float("nan") if p is None else p for p in prefill],
        }
    )


def test_the_split_comes_from_per_request_timings_where_they_exist() -> None:
    df = pd.concat(
        [
            _requests(0, [0.0, 2.0], [20.0, 22.0]),  # Groq-style: queue and prefill
            _requests(1, [None, None], [30.0, 50.0]),  # llama.cpp-style: prefill only
        ],
        ignore_index=True,
    )
    timed = server_split.level_request_timings(df)
    assert timed[0] == {"n": 2, "queue_n": 2, "queue_ms": 1.0, "prefill_ms": 21.0, "ttft_ms": 22.0}
    assert timed[1]["queue_ms"] is None and timed[1]["ttft_ms"] is None
    name = "vllm:request_queue_time_seconds"
    ttft_name = "vllm:time_to_first_token_seconds"
    s = _samples(
        [
            (0.5, name + "_sum", {}, 0.0),
            (0.5, name + "_count", {}, 0.0),
            (2.5, name + "_sum", {}, 1.0),  # 1 s over 10 requests: 100 ms each
            (2.5, name + "_count", {}, 10.0),
            (0.5, ttft_name + "_sum", {}, 0.0),
            (0.5, ttft_name + "_count", {}, 0.0),
            (2.5, ttft_name + "_sum", {}, 1.5),  # 150 ms each
            (2.5, ttft_name + "_count", {}, 10.0),
        ]
    )
    series = sm.role_series(s, {"queue_time_histogram": [name], "ttft_histogram": [ttft_name]})
    span = (T0, T0 + pd.Timedelta(seconds=3))
    stats = sm.level_server_stats(series, {0: span, 1: span}, timed)
    per_req = "per-request server timings, n=2"
    assert (stats[0]["server_queue_ms"], stats[0]["server_prefill_ms"]) == (1.0, 21.0)
    assert stats[0]["server_ttft_ms"] == 22.0
    assert set(stats[0]["sources"].values()) == {per_req}
    assert stats[0]["hist_queue_ms"] == pytest.approx(100.0)  # the histograms' kept beside
    # prefill only per request: the queue (and the TTFT) from the histograms, and so labelled
    assert stats[1]["server_prefill_ms"] == 40.0
    assert stats[1]["server_queue_ms"] == pytest.approx(100.0)
    assert stats[1]["sources"] == {
        "server_ttft_ms": "server histograms",
        "server_queue_ms": "server histograms",
        "server_prefill_ms": per_req,
    }
    assert (
        server_diagnosis.split_sources(stats[1])
        == f"TTFT/queue: server histograms; prefill: {per_req}"
    )


def test_diagnosis_from_per_request_queue_times_without_a_gauge() -> None:
    src = {k: "per-request server timings, n=50" for k in ("server_queue_ms", "server_prefill_ms")}
    levels = [_lv(0, 4, 60, 26), _lv(1, 16, 160, 44), _lv(2, 48, 2300, 45)]
    server = {
        lv: {"server_queue_ms": q, "server_prefill_ms": 40.0, "sources": src}
        for lv, q in ((0, 1.0), (1, 90.0), (2, 2150.0))
    }
    d = server_diagnosis.diagnose(levels, server)
    assert d["verdict"] == "admission", d["sentence"]
    assert d["numbers"]["queue_evidence"] == "per-request server queue times"
    assert "server queue time mean 90 -> 2150 ms (per request)" in d["sentence"]
    assert "At level 2 the server's own TTFT mean is 2150 ms queue" in d["sentence"]
    assert "(per-request server timings, n=50)" in d["sentence"]
    # the queue time explains little of the TTFT growth: no admission verdict
    small = {lv: {**v, "server_queue_ms": 1.0 + lv} for lv, v in server.items()}
    assert server_diagnosis.diagnose(levels, small)["verdict"] != "admission"
    # histogram-only queue times are no per-request evidence: still unknown without a gauge
    hist = {
        lv: {**v, "sources": {"server_queue_ms": "server histograms"}} for lv, v in server.items()
    }
    assert server_diagnosis.diagnose(levels, hist)["verdict"] == "unknown"


def test_region_server_time_from_the_servers_own_report() -> None:
    from analysis.stats import regions

    shards = pd.DataFrame(
        {
            "shard_id": ["s0"],
            "region": ["eu"],
            "network_rtt_ns": [2e6],
            "connect_ns": [1e6],
            "clock_offset_ns": [0.0],
            "clock_uncertainty_ns": [1e5],
            "clock_suspect": [False],
        }
    )
    base = pd.DataFrame(
        {
            "region": "eu",
            "outcome": "ok",
            "phase": "steady",
            "sent_ns": 0,
            "first_token_ns": [30e6, 40e6, 50e6],
        }
    )
    (no_timings,) = regions.region_breakdown(base, shards)
    assert no_timings["server_time_source"] == regions.FROM_RTT
    assert no_timings["server_time_ms"]["p50"] == pytest.approx(38.0)  # 40 - 2
    timed = base.assign(server_queue_ms=[5.0, 6.0, 7.0], server_prefill_ms=[20.0, 25.0, 30.0])
    (r,) = regions.region_breakdown(timed, shards)
    assert r["server_time_source"] == regions.FROM_SERVER
    assert r["server_time_ms"]["p50"] == pytest.approx(31.0)  # 6 + 25
    assert r["server_queue_ms"]["p50"] == 6.0 and r["server_prefill_ms"]["p50"] == 25.0
    part = timed.assign(server_queue_ms=float("nan"))  # llama.cpp: prefill only
    (p,) = regions.region_breakdown(part, shards)
    assert p["server_time_source"] == regions.FROM_RTT and p["server_prefill_ms"]["p50"] == 25.0
    assert p["server_reported_n"] == 3

    # compared with a run whose server time is TTFT - RTT: marked, no change computed
    rows = regions.compare_regions([no_timings], [r])
    server_rows = [x for x in rows if x["metric"].startswith("server_time")]
    assert server_rows and all(x["change_pct"] is None for x in server_rows)
    assert all(x["metric"].endswith("(sources differ)") for x in server_rows)


def test_the_series_split_comes_from_per_request_timings_where_they_exist() -> None:
    """Buckets of 1 s: in the first two the requests report queue + prefill (first token at
    0.4 s and 1.6 s); the third only the histograms know (queue 100 ms, TTFT 150 ms); in the
    first the histograms are kept beside the requests' figures."""
    from analysis.reports.render_server import server_fig

    name = "vllm:request_queue_time_seconds"
    ttft_name = "vllm:time_to_first_token_seconds"
    s = _samples(
        [
            (t, n + sfx, {}, v)
            for t, n, sfx, v in [
                (0.1, name, "_sum", 0.0),
                (0.1, name, "_count", 0.0),
                (0.9, name, "_sum", 0.5),  # 500 ms over 1 request
                (0.9, name, "_count", 1.0),
                (2.5, name, "_sum", 1.5),  # 1 s over 10: 100 ms each
                (2.5, name, "_count", 11.0),
                (0.1, ttft_name, "_sum", 0.0),
                (0.1, ttft_name, "_count", 0.0),
                (2.5, ttft_name, "_sum", 1.5),  # 150 ms each (over 0.1-2.5 s: bucket 2)
                (2.5, ttft_name, "_count", 10.0),
            ]
        ]
    )
    series = sm.role_series(s, {"queue_time_histogram": [name], "ttft_histogram": [ttft_name]})
    df = pd.DataFrame(
        {
            "level": 0,
            "outcome": ["ok", "ok", "ok", "error"],
            "phase": "steady",
            "scheduled_at": [T0, T0, T0 + pd.Timedelta(seconds=1), T0],
            "first_token_ns": [4e8, 3e8, 6e8, 2e8],
            "server_queue_ms": [10.0, 30.0, 5.0, 99.0],
            "server_prefill_ms": [20.0, 40.0, 7.0, 99.0],
        }
    )
    timed = server_split.bucket_request_timings(df, 1.0)
    assert sorted(timed) == [T0, T0 + pd.Timedelta(seconds=1)]  # by first token; ok only
    assert timed[T0]["queue_ms"] == 20.0 and timed[T0]["n"] == 2
    rows = server_split.server_series(sm.bucketed(series, 1.0), timed).set_index("bucket")
    first, second, third = (rows.loc[T0 + pd.Timedelta(seconds=k)] for k in range(3))
    assert (first["server_queue_ms"], first["server_prefill_ms"]) == (20.0, 30.0)
    assert first["server_ttft_ms"] == 50.0
    assert first["server_queue_ms_source"] == server_split.FROM_REQUESTS
    assert first["hist_queue_ms"] == pytest.approx(500.0)  # the histograms' kept beside
    assert (second["server_queue_ms"], second["timed_requests"]) == (5.0, 1)  # no histogram
    assert third["server_queue_ms"] == pytest.approx(100.0)
    assert third["server_prefill_ms"] == pytest.approx(50.0)  # TTFT 150 - queue 100
    assert (
        third["server_queue_ms_source"] == server_split.FROM_HISTOGRAMS
        and third["timed_requests"] == 0
    )
    lines = dict(server_split.series_by_source(rows.reset_index(), "server_queue_ms"))
    assert lines[server_split.FROM_REQUESTS].tolist()[:2] == [20.0, 5.0]
    assert pd.isna(lines[server_split.FROM_REQUESTS].tolist()[2])
    assert pd.isna(lines[server_split.FROM_HISTOGRAMS].tolist()[0])
    assert lines[server_split.FROM_HISTOGRAMS].tolist()[2] == pytest.approx(100.0)
    report = {
        "timeseries": {"rows": [], "bucket_s": 1.0},
        "server": {"rows": rows.reset_index().to_dict("records"), "client_ttft": []},
    }
    fig = server_fig(report)
    assert fig is not None
    names = {t.name for t in fig.data}
    assert f"server queue ({server_split.FROM_REQUESTS})" in names
    assert f"server queue ({server_split.FROM_HISTOGRAMS})" in names
    assert f"server prefill + first step ({server_split.FROM_REQUESTS})" in names


def _reported_timings(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-request server prefill and queue times (ms), a fifth and two fifths unreported."""
    prefill, queue = rng.gamma(2.0, 30.0, n), rng.gamma(1.5, 10.0, n)
    prefill[rng.random(n) < 0.2] = np.nan
    queue[rng.random(n) < 0.4] = np.nan
    return prefill, queue


def test_bucket_timings_are_each_buckets_own_account() -> None:
    """bucket_request_timings groups with numpy; each bucket's account is still _timings_of over
    the ok requests whose first token arrived in it, in frame order (means to the last bit)."""
    rng = np.random.default_rng(5)
    n = 3_000
    prefill, queue = _reported_timings(rng, n)
    scheduled = rng.integers(0, 20_000_000_000, n)
    untimed = scheduled < 2_000_000_000  # the first 2 s: no timings at all
    prefill[untimed] = queue[untimed] = np.nan
    df = pd.DataFrame(
        {
            "outcome": np.where(rng.random(n) < 0.05, "error", "ok"),
            "scheduled_at": T0 + pd.to_timedelta(scheduled, "ns"),
            "first_token_ns": rng.integers(1_000_000, 900_000_000, n).astype("float64"),
            "server_queue_ms": queue,
            "server_prefill_ms": prefill,
        }
    )
    ok = df[df["outcome"] == "ok"]
    arrived = ok["scheduled_at"] + pd.to_timedelta(ok["first_token_ns"], "ns")
    for bucket_s in (0.5, 1.0, 7.0):
        want = {
            pd.Timestamp(b): t
            for b, sub in ok.groupby(server_split.bucket_of(arrived, bucket_s))
            if (t := server_split._timings_of(sub)) is not None
        }
        got = server_split.bucket_request_timings(df, bucket_s)
        assert list(got) == list(want) and got == want
        if bucket_s == 1.0:  # whole seconds from T0: the first two hold no timed request
            assert min(got) >= T0 + pd.Timedelta(seconds=2)


def test_level_timings_are_each_levels_own_account() -> None:
    """level_request_timings masks the columns' arrays per level; each level's account is still
    _timings_of over its steady-phase ok requests, in frame order (means to the last bit), and a
    level where none reported is absent."""
    rng = np.random.default_rng(7)
    n = 4_000
    prefill, queue = _reported_timings(rng, n)
    level = rng.integers(0, 5, n)
    prefill[level == 3] = queue[level == 3] = np.nan  # level 3 reported nothing
    df = pd.DataFrame(
        {
            "level": level,
            "outcome": np.where(rng.random(n) < 0.05, "error", "ok"),
            "phase": np.where(rng.random(n) < 0.2, "warmup", "steady"),
            "server_queue_ms": queue,
            "server_prefill_ms": prefill,
        }
    )
    ok = df[(df["outcome"] == "ok") & (df["phase"] == "steady")]
    want = {int(lv): t for lv, sub in ok.groupby("level") if (t := server_split._timings_of(sub))}
    got = server_split.level_request_timings(df)
    assert list(got) == [0, 1, 2, 4] == list(want) and got == want


def test_client_ttft_series_is_the_ok_requests_by_first_token_bucket() -> None:
    """client_ttft_series masks arrays, not the frame: the same table as grouping the ok
    requests with a first token by the bucket their first token arrived in."""
    rng = np.random.default_rng(11)
    n = 3_000
    sent = rng.integers(0, 5_000_000, n).astype("float64")
    first = sent + rng.gamma(2.0, 40e6, n)
    first[rng.random(n) < 0.1] = np.nan  # no first token
    df = pd.DataFrame(
        {
            "outcome": np.where(rng.random(n) < 0.05, "error", "ok"),
            "scheduled_at": T0 + pd.to_timedelta(rng.integers(0, 30_000_000_000, n), "ns"),
            "sent_ns": sent,
            "first_token_ns": first,
        }
    )
    ok = df[(df["outcome"] == "ok") & df["first_token_ns"].notna()]
    arrived = ok["scheduled_at"] + pd.to_timedelta(ok["first_token_ns"], "ns")
    ttft = (ok["first_token_ns"] - ok["sent_ns"]) / 1e6
    g = ttft.groupby(server_split.bucket_of(arrived, 2.0))
    want = pd.DataFrame({"ttft_p50_ms": g.quantile(0.5), "ttft_p90_ms": g.quantile(0.9)})
    want = want.rename_axis("bucket").reset_index()
    got = sm.client_ttft_series(df, 2.0)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)
