"""The Prometheus text parser: labels with escapes, comments, NaN and junk lines."""

from __future__ import annotations

from loadgen.targets.prometheus import parse_exposition

TEXT = r"""
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 7.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
llamacpp:prompt_tokens_total 1234
odd{a="x\"y",b="line\nbreak"} 1e3 1700000000000
nan_metric NaN
broken line without value
"""


def test_parses_samples_labels_and_skips_junk() -> None:
    s = parse_exposition(TEXT, 42)
    by = {x.name: x for x in s}
    assert set(by) == {
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "llamacpp:prompt_tokens_total",
        "odd",
    }
    assert by["vllm:num_requests_running"].labels == {"model_name": "m", "engine": "0"}
    assert by["vllm:num_requests_running"].value == 7.0
    assert by["odd"].labels == {"a": 'x"y', "b": "line\nbreak"} and by["odd"].value == 1000.0
    assert all(x.t_ns == 42 for x in s)
