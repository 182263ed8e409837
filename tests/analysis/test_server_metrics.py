"""analysis.stats.server_metrics without a store: role mapping (preset selectors, label matching),
bucketing of gauges and histogram deltas, per-level stats, and the diagnosis rules."""

from __future__ import annotations

import pandas as pd
import pytest

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
    d = sm.diagnose(levels, server)
    assert d["verdict"] == "admission"
    assert d["numbers"]["ttft_ratio"] == pytest.approx(2300 / 160)
    assert "160 -> 2300 ms" in d["sentence"] and "0.4 -> 31.5" in d["sentence"]
    dec = sm.diagnose(
        [_lv(0, 4, 60, 20), _lv(1, 8, 70, 40)], {0: {"queue_mean": 0.0}, 1: {"queue_mean": 0.2}}
    )
    assert dec["verdict"] == "decoding"
    flat = sm.diagnose(
        [_lv(0, 1, 60, 20), _lv(1, 2, 61, 21)], {0: {"queue_mean": 0.0}, 1: {"queue_mean": 0.0}}
    )
    assert flat["verdict"] == "neither"
    both = sm.diagnose(
        [_lv(0, 1, 60, 20), _lv(1, 2, 200, 40)], {0: {"queue_mean": 0.0}, 1: {"queue_mean": 5.0}}
    )
    assert both["verdict"] == "both"
    assert sm.diagnose(levels, {})["verdict"] == "unknown"
    assert sm.diagnose(levels[:1], server)["verdict"] == "unknown"


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
    from loadgen.prometheus import parse_exposition

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
