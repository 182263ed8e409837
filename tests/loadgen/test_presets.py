"""Presets: every file validates; a spec naming one takes its defaults and overrides any field;
the prices and limits #14 reads are the dated figures of issue #13."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from loadgen.errors import SpecError
from loadgen.runspec.presets import MetricsNames, all_presets, load_preset, preset_names
from loadgen.runspec.spec import spec_from_dict
from ui.cli import cli

TWELVE = {
    "vllm", "sglang", "llamacpp", "ollama", "tgi", "triton",
    "tensorrt-llm", "mlx", "groq", "cerebras", "together", "fireworks",
}  # fmt: skip


def test_the_twelve_systems_and_the_generic_one_have_valid_presets() -> None:
    assert TWELVE | {"openai-compatible"} | AUDIO == set(preset_names())
    for p in all_presets():
        assert p.protocol in p.protocols or not p.protocols, p.name
        unscraped = {"ollama", "mlx", "audiocpp"}
        assert (p.metrics is None) == (p.kind == "hosted" or p.name in unscraped), p.name
        if p.kind == "hosted" and p.name != "openai-compatible":
            assert p.base_url.startswith("https://"), p.name
            assert p.auth.scheme == "bearer" and p.auth.env, p.name


AUDIO = {"audiocpp", "groq-whisper"}  # the speech presets (#26)


def test_speech_presets_price_audio_hours_with_their_date_and_source() -> None:
    whisper = load_preset("groq-whisper")
    assert whisper.protocol == "openai-transcription" and whisper.prices is not None
    assert whisper.prices.as_of == dt.date(2026, 12, 2)
    assert "console.groq.com/docs/speech-text" in whisper.prices.source
    m = whisper.prices.models
    assert (m["whisper-large-v3"].audio_per_hour, m["whisper-large-v3-turbo"].audio_per_hour) == (
        0.111,
        0.04,
    )
    assert m["whisper-large-v3"].input_per_mtok is None
    assert set(load_preset("audiocpp").protocols) == {"openai-speech", "openai-transcription"}


def test_dated_list_prices_and_free_tier_limits() -> None:
    groq = load_preset("groq")
    assert groq.prices is not None and groq.prices.as_of == dt.date(2026, 10, 19)
    m = groq.prices.models
    assert (m["openai/gpt-oss-120b"].input_per_mtok, m["openai/gpt-oss-120b"].output_per_mtok) == (
        0.15,
        0.60,
    )
    assert (m["openai/gpt-oss-20b"].input_per_mtok, m["openai/gpt-oss-20b"].output_per_mtok) == (
        0.075,
        0.30,
    )
    assert groq.limits is not None
    assert (groq.limits.requests_per_minute, groq.limits.requests_per_day) == (30, 1000)
    cer = load_preset("cerebras").prices
    assert cer is not None and cer.models["gpt-oss-120b"].output_per_mtok == 0.75
    for name, model in (
        ("together", "openai/gpt-oss-120b"),
        ("fireworks", "accounts/fireworks/models/gpt-oss-120b"),
    ):
        pr = load_preset(name).prices
        assert pr is not None and pr.as_of == dt.date(2026, 10, 19)
        assert (pr.models[model].input_per_mtok, pr.models[model].output_per_mtok) == (0.15, 0.60)
    for name in ("vllm", "llamacpp", "sglang"):
        assert load_preset(name).prices is None


def test_metric_names_and_label_selectors() -> None:
    vllm = load_preset("vllm").metrics
    assert vllm is not None and vllm.path == "/metrics"
    assert vllm.queue == "vllm:num_requests_waiting"
    assert vllm.running == "vllm:num_requests_running"
    triton = load_preset("triton").metrics
    assert triton is not None and triton.port == 8002
    assert MetricsNames.split(triton.running) == (
        "nv_trt_llm_request_metrics",
        {"request_type": "active"},
    )
    assert MetricsNames.split("tgi_queue_size") == ("tgi_queue_size", {})


def _spec(target: dict[str, object]) -> dict[str, object]:
    return {"name": "p", "target": target, "load": {"concurrency": [1], "duration_s": 5}}


def test_spec_takes_preset_defaults_and_overrides_any_field() -> None:
    spec = spec_from_dict(_spec({"preset": "groq", "model": "openai/gpt-oss-20b"}))
    t = spec.target
    assert (t.preset, t.api, t.base_url) == (
        "groq",
        "openai-chat",
        "https://api.groq.com/openai/v1",
    )
    assert (t.api_key_env, t.max_tokens_field) == ("GROQ_API_KEY", "max_completion_tokens")
    over = spec_from_dict(
        _spec(
            {
                "preset": "groq",
                "model": "m",
                "base_url": "http://127.0.0.1:9/v1",
                "max_tokens_field": "max_tokens",
                "api_key_env": "MY_KEY",
            }
        )
    ).target
    assert (over.base_url, over.max_tokens_field, over.api_key_env) == (
        "http://127.0.0.1:9/v1",
        "max_tokens",
        "MY_KEY",
    )
    assert spec_from_dict(_spec({"preset": "vllm", "model": "m"})).target.metrics_url == (
        "http://localhost:8000/metrics"
    )


def test_unknown_preset_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"target\.preset: unknown preset 'nope'"):
        spec_from_dict(_spec({"preset": "nope", "model": "m"}))


def test_presets_command_lists_and_shows() -> None:
    r = CliRunner().invoke(cli, ["presets", "--json"])
    assert r.exit_code == 0, r.output
    assert {p["name"] for p in json.loads(r.output)} == TWELVE | {"openai-compatible"} | AUDIO
    r = CliRunner().invoke(cli, ["presets", "cerebras"])
    assert r.exit_code == 0 and '"gpt-oss-120b"' in r.output
    r = CliRunner().invoke(cli, ["presets", "nope"])
    assert r.exit_code == 2 and "unknown preset" in r.output
