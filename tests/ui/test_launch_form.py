"""The Launch form: its one TOML writer round-trips through the project's spec loader (form values
-> TOML -> spec_from_dict -> the same values), a bad spec gives one error per bad field, and the
page (AppTest) builds the TOML from the widgets and shows a real probe's verdicts against the
simulated engine before Start is enabled."""

from __future__ import annotations

import tomllib
from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

from loadgen.errors import SpecError
from loadgen.runspec.spec import spec_from_dict
from tests.support.sim import start_sim
from tests.ui.conftest import page_text
from ui import launch
from ui.spec_form import FormValues, Length, Slo, form_from_spec, parse_numbers, to_toml

FORM_KEY = "sk-ui-form-canary-7731"
FORMS = [
    FormValues(base_url="http://127.0.0.1:9/v1", model="m"),
    FormValues(
        name="rates",
        preset="vllm",
        api="openai-completions",
        base_url="http://localhost:8000/v1",
        model="meta-llama/Llama-3.1-8B-Instruct",
        api_key_env="VLLM_API_KEY",
        prompt=Length(dist="uniform", min=10, max=300),
        output=Length(dist="normal", mean=200.0, std=20.5, min=5, max=400),
        load_model="rate",
        rates=(0.5, 2.0, 8.0),
        arrival="gamma",
        duration_s=12.5,
        warmup_s=1.0,
        cooldown_s=0.5,
        slos=(Slo("ttft_ms", 99.0, 250.0), Slo("itl_ms", 90.0, 40.0)),
    ),
    FormValues(
        name="ramp",
        preset="together",
        base_url="https://api.together.xyz/v1",
        model="openai/gpt-oss-120b",
        api_key_env="TOGETHER_API_KEY",
        prompt=Length(dist="lognormal", median=512.0, sigma=0.8, min=16, max=0),
        load_model="ramp",
        ramp_from=0.0,
        ramp_to=20.0,
        arrival="constant",
        warmup_s=0.0,
    ),
    FormValues(
        name="search",
        base_url="https://api.example.com/v1",
        model="x",
        load_model="saturation",
        search_start=2.0,
        search_max=128.0,
        search_max_steps=6,
        search_tolerance=0.2,
        slos=(Slo("e2e_ms", 95.0, 5000.0),),
    ),
]


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
def test_form_values_round_trip_through_the_spec_loader(form: FormValues) -> None:
    text = to_toml(form)
    spec = spec_from_dict(tomllib.loads(text), where="form")
    assert form_from_spec(spec) == form
    keys = [line for line in text.splitlines() if line.startswith("api_key_env")]
    assert keys == ([f'api_key_env = "{form.api_key_env}"'] if form.api_key_env else [])


def test_a_bad_form_gives_one_error_per_bad_field() -> None:
    form = FormValues(
        base_url="ftp://nowhere",
        model="m",
        prompt=Length(dist="uniform", min=50, max=10),
        api_key_env="NOT A NAME",
        warmup_s=40.0,
    )
    with pytest.raises(SpecError) as err:
        launch.parse_spec(to_toml(form), "form")
    problems = err.value.problems
    assert len(problems) == 4, problems
    assert [p.split(":")[0] for p in problems] == [
        "target.base_url",
        "target.api_key_env",
        "workload.prompt_tokens",
        "load",
    ]
    with pytest.raises(SpecError, match=r"load\.concurrency"):
        parse_numbers("1, eight", int, "load.concurrency")


def test_the_form_page_writes_the_toml_and_shows_the_probe(
    app_page: Callable[..., AppTest], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PEAKLOAD_TARGET_ALLOWLIST", "127.0.0.1")
    monkeypatch.delenv("PEAKLOAD_REDIS_URL", raising=False)
    monkeypatch.setenv("UI_FORM_KEY", FORM_KEY)
    with start_sim(["--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "1"]) as sim:
        at = app_page("launch")
        at.selectbox(key="lf_preset").set_value("llamacpp").run()
        assert "llama" in page_text(at).lower()  # the preset's model convention is shown
        at.text_input(key="lf_base_url").input(sim.base_url)
        at.text_input(key="lf_model").input("sim-model")
        at.text_input(key="lf_key_env").input("UI_FORM_KEY")
        at.selectbox(key="lf_prompt_dist").set_value("uniform").run()
        at.number_input(key="lf_prompt_min").set_value(8)
        at.number_input(key="lf_prompt_max").set_value(32)
        at.text_input(key="lf_concurrency").input("1, 2")
        at.number_input(key="lf_dur").set_value(2.0)
        at.number_input(key="lf_warm").set_value(0.0).run()
        assert not at.exception
        spec = spec_from_dict(tomllib.loads(at.text_area(key="launch_text").value))
        assert spec.target.preset == "llamacpp" and spec.target.base_url == sim.base_url
        assert spec.target.api_key_env == "UI_FORM_KEY" and spec.load.concurrency == [1, 2]
        assert spec.workload.prompt_tokens.model_dump() == {"dist": "uniform", "min": 8, "max": 32}
        assert at.button(key="launch_start").disabled  # not yet probed
        at.button(key="launch_probe").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        verdicts = at.dataframe[0].value
        assert {"stream", "max_tokens"} <= set(verdicts["parameter"])
        assert "Probe: nothing rejected" in page_text(at)
        assert not at.button(key="launch_start").disabled
        assert FORM_KEY not in at.text_area(key="launch_text").value + page_text(at)
        # an edit to the TOML is a new spec: probe again before Start
        at.text_area(key="launch_text").input(
            at.text_area(key="launch_text").value.replace("1, 2", "3")
        ).run()
        assert at.button(key="launch_start").disabled
        # a bad edit: one error per bad field, nothing to start
        bad = at.text_area(key="launch_text").value.replace(f'"{sim.base_url}"', '"ftp://x"')
        at.text_area(key="launch_text").input(bad.replace("duration_s = 2.0", "duration_s = -1.0"))
        at.run()
        errors = [e.value for e in at.error]
        assert any(e.startswith("target.base_url") for e in errors), errors
        assert any(e.startswith("load.duration_s") for e in errors), errors
