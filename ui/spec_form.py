"""The Launch form's values and the one function that writes them as a run spec's TOML
(`to_toml`), its inverse (`form_from_spec`: what a validated spec says, as form values), and
what the form shows of a preset. Pure: no Streamlit, no network. Units: seconds, requests/s,
tokens, ms for SLO thresholds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import tomli_w

from loadgen.errors import SpecError
from loadgen.runspec.lengths import FixedLength, LognormalLength, NormalLength, UniformLength
from loadgen.runspec.presets import load_preset
from loadgen.runspec.spec import RunSpec

LoadModel = Literal["concurrency", "rate", "ramp", "saturation"]
LOAD_MODELS: tuple[LoadModel, ...] = ("concurrency", "rate", "ramp", "saturation")
DISTS = ("fixed", "uniform", "normal", "lognormal")
ARRIVALS = ("poisson", "constant", "gamma")
SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms")


@dataclass(frozen=True)
class Length:
    """A token-length distribution; only the fields of `dist` are written (fixed: value;
    uniform: min, max; normal: mean, std, min, max; lognormal: median, sigma, min, max).
    `max` 0 means no upper bound for normal and lognormal."""

    dist: str = "fixed"
    value: int = 128
    min: int = 1
    max: int = 0
    mean: float = 128.0
    std: float = 32.0
    median: float = 128.0
    sigma: float = 0.5

    def table(self) -> int | dict[str, Any]:
        if self.dist == "fixed":
            return self.value
        if self.dist == "uniform":
            return {"dist": "uniform", "min": self.min, "max": self.max}
        bounded = {"min": self.min, **({"max": self.max} if self.max else {})}
        if self.dist == "normal":
            return {"dist": "normal", "mean": self.mean, "std": self.std, **bounded}
        if self.dist == "lognormal":
            return {"dist": "lognormal", "median": self.median, "sigma": self.sigma, **bounded}
        raise SpecError(f"unknown distribution {self.dist!r} (known: {', '.join(DISTS)})")


@dataclass(frozen=True)
class Slo:
    metric: str = "ttft_ms"
    percentile: float = 90.0
    threshold: float = 1000.0  # ms


@dataclass(frozen=True)
class FormValues:
    """Everything the Launch form asks. The API key is named (`api_key_env`), never held."""

    name: str = "ui-sweep"
    preset: str = ""  # "" = none
    api: str = "openai-chat"
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""  # "" = no key
    prompt: Length = field(default_factory=Length)
    output: Length = field(default_factory=Length)
    load_model: LoadModel = "concurrency"
    concurrency: tuple[int, ...] = (1, 8, 32)
    rates: tuple[float, ...] = (1.0, 4.0)
    arrival: str = "poisson"
    ramp_from: float = 0.0  # requests/s
    ramp_to: float = 10.0
    search_start: float = 1.0  # requests/s
    search_max: float = 64.0
    search_max_steps: int = 8
    search_tolerance: float = 0.1
    duration_s: float = 30.0
    warmup_s: float = 5.0
    cooldown_s: float = 0.0
    slos: tuple[Slo, ...] = ()


def to_dict(form: FormValues) -> dict[str, Any]:
    """The run spec the form describes, as the dict `spec_from_dict` reads."""
    target: dict[str, Any] = {}
    if form.preset:
        target["preset"] = form.preset
    target.update(api=form.api, base_url=form.base_url, model=form.model)
    if form.api_key_env:
        target["api_key_env"] = form.api_key_env
    load: dict[str, Any] = {}
    if form.load_model == "concurrency":
        load["concurrency"] = list(form.concurrency)
    elif form.load_model == "rate":
        load.update(rate=list(form.rates), arrival=form.arrival)
    elif form.load_model == "ramp":
        load.update(ramp={"from_rate": form.ramp_from, "to_rate": form.ramp_to})
        load["arrival"] = form.arrival
    elif form.load_model == "saturation":
        load["saturation"] = {
            "start": form.search_start,
            "max": form.search_max,
            "max_steps": form.search_max_steps,
            "tolerance": form.search_tolerance,
        }
        load["arrival"] = form.arrival
    else:
        raise SpecError(f"unknown load model {form.load_model!r}", "load")
    load.update(duration_s=form.duration_s, warmup_s=form.warmup_s, cooldown_s=form.cooldown_s)
    out: dict[str, Any] = {
        "name": form.name,
        "target": target,
        "workload": {"prompt_tokens": form.prompt.table(), "output_tokens": form.output.table()},
        "load": load,
    }
    if form.slos:
        out["slos"] = [
            {"metric": s.metric, "percentile": s.percentile, "threshold": s.threshold}
            for s in form.slos
        ]
    return out


def to_toml(form: FormValues) -> str:
    """The form as a run spec's TOML text (the only writer: the page shows, downloads, checks
    and launches exactly this)."""
    head = "# written by the Launch form; the API key is named by api_key_env, never stored\n"
    return head + _NUMBER_ARRAY.sub(_one_line, tomli_w.dumps(to_dict(form)))


# tomli_w writes every array one item a line; levels read better as `[1, 8, 32]`
_NUMBER_ARRAY = re.compile(r"\[\n((?:[ ]+[-+0-9.eE]+,\n)+)\]")


def _one_line(m: re.Match[str]) -> str:
    return "[" + ", ".join(x.strip().rstrip(",") for x in m.group(1).splitlines()) + "]"


def _length(d: FixedLength | UniformLength | NormalLength | LognormalLength) -> Length:
    if isinstance(d, FixedLength):
        return Length(value=d.value)
    if isinstance(d, UniformLength):
        return Length(dist="uniform", min=d.min, max=d.max)
    if isinstance(d, NormalLength):
        return Length(dist="normal", mean=d.mean, std=d.std, min=d.min, max=d.max or 0)
    return Length(dist="lognormal", median=d.median, sigma=d.sigma, min=d.min, max=d.max or 0)


def form_from_spec(spec: RunSpec) -> FormValues:
    """The form values a validated spec holds (the inverse of `to_toml` for what the form
    asks; a load model the form has no fields for, a trace, raises SpecError)."""
    t, ld = spec.target, spec.load
    base: dict[str, Any] = {
        "name": spec.name,
        "preset": t.preset or "",
        "api": t.api,
        "base_url": t.base_url,
        "model": t.model,
        "api_key_env": t.api_key_env or "",
        "prompt": _length(spec.workload.prompt_tokens),
        "output": _length(spec.workload.output_tokens),
        "duration_s": ld.duration_s,
        "warmup_s": ld.warmup_s,
        "cooldown_s": ld.cooldown_s,
        "slos": tuple(Slo(s.metric, s.percentile, s.threshold) for s in spec.slos),
        "arrival": ld.arrival,
    }
    if ld.concurrency is not None:
        return FormValues(**base, load_model="concurrency", concurrency=tuple(ld.concurrency))
    if ld.rate is not None:
        return FormValues(**base, load_model="rate", rates=tuple(ld.rate))
    if ld.ramp is not None:
        r = ld.ramp
        return FormValues(**base, load_model="ramp", ramp_from=r.from_rate, ramp_to=r.to_rate)
    if ld.saturation is not None:
        s = ld.saturation
        return FormValues(
            **base,
            load_model="saturation",
            search_start=s.start,
            search_max=s.max,
            search_max_steps=s.max_steps,
            search_tolerance=s.tolerance,
        )
    raise SpecError("the form has no fields for a trace replay: edit the TOML instead", "load")


def parse_numbers(text: str, kind: type[int] | type[float], where: str) -> tuple[Any, ...]:
    """Comma- or space-separated levels ("1, 8, 32"); SpecError naming `where` otherwise."""
    parts = [p for p in text.replace(",", " ").split() if p]
    try:
        return tuple(kind(p) for p in parts)
    except ValueError:
        what = "whole numbers" if kind is int else "numbers"
        raise SpecError(f"{text!r} is not a list of {what} (e.g. 1, 8, 32)", where) from None


@dataclass(frozen=True)
class PresetFacts:
    """What the form shows of a preset and the target fields it fills in."""

    title: str
    model_ids: str
    example_models: tuple[str, ...]
    key_env: str  # "" = the preset names no key variable
    key_note: str
    api: str
    protocols: tuple[str, ...]
    base_url: str
    base_url_hint: str


def preset_facts(name: str) -> PresetFacts:
    p = load_preset(name)
    scheme = {"bearer": "required", "optional-bearer": "optional", "none": "none"}
    note = scheme.get(p.auth.scheme, p.auth.scheme) + (f": {p.auth.note}" if p.auth.note else "")
    return PresetFacts(
        title=p.title,
        model_ids=p.model_ids,
        example_models=tuple(p.example_models),
        key_env=p.auth.env or "",
        key_note=note,
        api=p.protocol,
        protocols=tuple(p.protocols or [p.protocol]),
        base_url=str(p.target_defaults().get("base_url", "")),
        base_url_hint=p.base_url_hint,
    )
