"""The Launch form's widgets: target (preset, with its model convention and key variable), model,
the key's variable name, workload lengths, load shape and SLOs, read into `ui.spec_form.FormValues`.
Choosing a preset fills the target fields it defines; every field stays editable."""

from __future__ import annotations

from typing import Any

import streamlit as st

from loadgen.runspec.presets import PROTOCOLS, preset_names
from ui import spec_form as sf
from ui.spec_form import FormValues, Length, Slo

DEFAULTS = FormValues()
MAX_SLOS = 4


def _apply_preset() -> None:
    """On a new preset: its API, base URL, key variable and first example model."""
    name = st.session_state.get("lf_preset") or ""
    if not name:
        return
    facts = sf.preset_facts(name)
    st.session_state["lf_api"] = facts.api
    st.session_state["lf_base_url"] = facts.base_url
    st.session_state["lf_key_env"] = facts.key_env
    if facts.example_models:
        st.session_state["lf_model"] = facts.example_models[0]


def _init() -> None:
    for key, value in (
        ("lf_name", DEFAULTS.name),
        ("lf_preset", DEFAULTS.preset),
        ("lf_api", DEFAULTS.api),
        ("lf_base_url", DEFAULTS.base_url),
        ("lf_model", DEFAULTS.model),
        ("lf_key_env", DEFAULTS.api_key_env),
    ):
        st.session_state.setdefault(key, value)


def _target() -> dict[str, Any]:
    st.subheader("Target")
    c = st.columns(2)
    preset = c[0].selectbox(
        "Preset (loadgen/presets)",
        ["", *preset_names()],
        format_func=lambda n: n or "none: a plain OpenAI-compatible endpoint",
        key="lf_preset",
        on_change=_apply_preset,
    )
    api = c[1].selectbox("API", PROTOCOLS, key="lf_api")
    if preset:
        facts = sf.preset_facts(preset)
        st.info(
            f"**{facts.title}** · model ids: {facts.model_ids}"
            + (f" (e.g. `{'`, `'.join(facts.example_models)}`)" if facts.example_models else "")
            + f" · API key: {facts.key_note}"
            + (f", usually in `${facts.key_env}`" if facts.key_env else "")
            + (f" · base URL: {facts.base_url_hint}" if facts.base_url_hint else "")
        )
    base_url = st.text_input("Base URL", key="lf_base_url", placeholder="https://host/v1")
    c = st.columns(2)
    model = c[0].text_input("Model", key="lf_model")
    key_env = c[1].text_input(
        "API key: the environment variable's NAME",
        key="lf_key_env",
        help="The key itself is never typed here nor stored: the run reads it from this "
        "variable in the environment of the process that sends (this server or the workers).",
    )
    return {
        "preset": preset or "",
        "api": api,
        "base_url": base_url.strip(),
        "model": model.strip(),
        "api_key_env": key_env.strip(),
    }


def _length(label: str, key: str) -> Length:
    c = st.columns(5)
    dist = c[0].selectbox(label, sf.DISTS, key=f"{key}_dist")
    d = DEFAULTS.prompt
    if dist == "fixed":
        return Length(value=int(c[1].number_input("tokens", 1, value=d.value, key=f"{key}_value")))
    if dist == "uniform":
        lo = int(c[1].number_input("min", 1, value=64, key=f"{key}_min"))
        hi = int(c[2].number_input("max", 1, value=256, key=f"{key}_max"))
        return Length(dist="uniform", min=lo, max=hi)
    if dist == "normal":
        mean = float(c[1].number_input("mean", 1.0, value=d.mean, key=f"{key}_mean"))
        std = float(c[2].number_input("std", 0.0, value=d.std, key=f"{key}_std"))
    else:
        mean = float(c[1].number_input("median", 1.0, value=d.median, key=f"{key}_median"))
        std = float(c[2].number_input("sigma (ln)", 0.0, 10.0, d.sigma, key=f"{key}_sigma"))
    lo = int(c[3].number_input("min", 1, value=1, key=f"{key}_lo"))
    hi = int(c[4].number_input("max (0: none)", 0, value=0, key=f"{key}_hi"))
    if dist == "normal":
        return Length(dist="normal", mean=mean, std=std, min=lo, max=hi)
    return Length(dist="lognormal", median=mean, sigma=std, min=lo, max=hi)


def _load() -> dict[str, Any]:
    st.subheader("Load shape")
    model = st.radio(
        "Load model",
        sf.LOAD_MODELS,
        horizontal=True,
        key="lf_load_model",
        format_func={
            "concurrency": "concurrency levels (closed loop)",
            "rate": "request rates (open loop)",
            "ramp": "rate ramp",
            "saturation": "saturation search (needs SLOs)",
        }.get,
    )
    out: dict[str, Any] = {"load_model": model}
    if model == "concurrency":
        text = st.text_input("Concurrency levels (streams)", "1, 8, 32", key="lf_concurrency")
        out["concurrency"] = sf.parse_numbers(text, int, "load.concurrency")
    else:
        c = st.columns(4)
        if model == "rate":
            text = c[0].text_input("Rates (requests/s)", "1, 4", key="lf_rates")
            out["rates"] = sf.parse_numbers(text, float, "load.rate")
        elif model == "ramp":
            out["ramp_from"] = c[0].number_input("from (requests/s)", 0.0, value=0.0, key="lf_rf")
            out["ramp_to"] = c[1].number_input("to (requests/s)", 0.001, value=10.0, key="lf_rt")
        else:
            out["search_start"] = c[0].number_input("start (req/s)", 0.001, value=1.0, key="lf_ss")
            out["search_max"] = c[1].number_input("max (req/s)", 0.001, value=64.0, key="lf_sm")
            out["search_max_steps"] = int(c[2].number_input("steps", 1, 32, 8, key="lf_sn"))
            out["search_tolerance"] = c[3].number_input("tolerance", 0.01, 0.99, 0.1, key="lf_st")
        out["arrival"] = st.radio("Arrivals", sf.ARRIVALS, horizontal=True, key="lf_arrival")
    d = st.columns(3)
    out["duration_s"] = d[0].number_input("Duration per level (s)", 0.1, value=30.0, key="lf_dur")
    out["warmup_s"] = d[1].number_input("Warm-up (s)", 0.0, value=5.0, key="lf_warm")
    out["cooldown_s"] = d[2].number_input("Cool-down (s)", 0.0, value=0.0, key="lf_cool")
    return out


def _slos() -> tuple[Slo, ...]:
    st.subheader("SLOs")
    n = int(st.number_input("How many", 0, MAX_SLOS, 1, key="lf_slo_n"))
    out = []
    for i in range(n):
        c = st.columns(3)
        metric = c[0].selectbox("metric", sf.SLO_METRICS, key=f"lf_slo{i}_metric")
        q = c[1].number_input("percentile", 0.1, 99.999, 90.0, key=f"lf_slo{i}_p")
        ms = c[2].number_input("threshold (ms)", 0.001, value=1000.0, key=f"lf_slo{i}_ms")
        out.append(Slo(str(metric), float(q), float(ms)))
    return tuple(out)


def form_values() -> FormValues:
    """Draw the form and read it; SpecError (naming the field) for levels that are not numbers."""
    _init()
    name = st.text_input("Run name", key="lf_name")
    target = _target()
    st.subheader("Workload lengths (tokens)")
    prompt = _length("Prompt", "lf_prompt")
    output = _length("Output", "lf_output")
    load = _load()
    slos = _slos()
    return FormValues(name=name, prompt=prompt, output=output, slos=slos, **target, **load)
