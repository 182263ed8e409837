"""Presets: what peakload knows about each engine and provider, as data (`loadgen/presets/*.toml`,
one file per system), validated here. A spec's `[target] preset = "groq"` takes the preset's target
defaults and overrides any of them; cost and server-metric code read prices, limits and metrics.
"""

from __future__ import annotations

import datetime as dt
import tomllib
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from loadgen.errors import SpecError
from loadgen.runspec.target_spec import APIS

PROTOCOLS = APIS  # every wire protocol a preset may name: the spec's `api` values
# the TargetSpec fields a preset may set (everything else is the spec's alone)
TARGET_DEFAULT_FIELDS = frozenset(
    {
        "api",
        "base_url",
        "api_key_env",
        "api_key_query",
        "metrics_url",
        "include_usage",
        "headers",
        "max_tokens_field",
    }
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelPrice(_Strict):
    """Per-token prices, or (speech models, billed by their audio) a price per audio hour."""

    input_per_mtok: float | None = Field(default=None, ge=0)  # USD per million input tokens
    output_per_mtok: float | None = Field(default=None, ge=0)  # USD per million output tokens
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    audio_per_hour: float | None = Field(default=None, ge=0)  # USD per hour of audio

    @model_validator(mode="after")
    def _priced(self) -> ModelPrice:
        if (self.input_per_mtok is None) != (self.output_per_mtok is None):
            raise ValueError("input_per_mtok and output_per_mtok go together")
        if self.input_per_mtok is None and self.audio_per_hour is None:
            raise ValueError("give input_per_mtok and output_per_mtok, or audio_per_hour")
        return self


class Prices(_Strict):
    """List prices as published on `as_of`; they change, so every use must show the date."""

    as_of: dt.date
    source: str = Field(min_length=1)
    models: dict[str, ModelPrice] = Field(min_length=1)


class Limits(_Strict):
    """Published limits of the cheapest tier; 0 = not published. Where and when they were read."""

    tier: str = ""
    requests_per_minute: int = Field(default=0, ge=0)
    requests_per_day: int = Field(default=0, ge=0)
    tokens_per_minute: int = Field(default=0, ge=0)
    tokens_per_day: int = Field(default=0, ge=0)
    as_of: dt.date
    source: str = Field(min_length=1)


MINUTE_S = 60
DAY_S = 86_400


class RateLimitHeaders(_Strict):
    """What the provider's `x-ratelimit-limit-requests` / `-tokens` headers count, per its own
    documentation: the window each limit is over, in seconds (60: per minute, 86400: per day;
    OpenAI's convention is per minute). Where and when that was read."""

    requests_window_s: int = Field(default=MINUTE_S, gt=0, le=DAY_S)
    tokens_window_s: int = Field(default=MINUTE_S, gt=0, le=DAY_S)
    as_of: dt.date
    source: str = Field(min_length=1)


class MetricsNames(_Strict):
    """The Prometheus endpoint and which series mean what. A name may carry a label selector
    (`nv_trt_llm_request_metrics{request_type="waiting"}`); "" = the engine exposes no such
    series. `port`, when set, is the metrics port if it differs from the API's."""

    path: str = Field(pattern=r"^/")
    port: int | None = Field(default=None, ge=1, le=65535)
    enable: str = ""  # how to switch the endpoint on, when it is off by default
    queue: str = ""
    running: str = ""
    kv_cache: str = ""
    ttft_histogram: str = ""
    queue_time_histogram: str = ""

    @staticmethod
    def split(selector: str) -> tuple[str, dict[str, str]]:
        """`name{a="x"}` -> ("name", {"a": "x"}); a bare name -> (name, {})."""
        name, brace, rest = selector.partition("{")
        if not brace:
            return name, {}
        labels: dict[str, str] = {}
        for part in rest.rstrip("}").split(","):
            key, _, value = part.partition("=")
            if key.strip():
                labels[key.strip()] = value.strip().strip('"')
        return name, labels


class Auth(_Strict):
    scheme: Literal["bearer", "header", "none", "optional-bearer"]
    header: str = "Authorization"
    env: str | None = None  # the key's usual environment variable
    note: str = ""


class Preset(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    kind: Literal["hosted", "engine"]
    protocol: str
    title: str = Field(min_length=1)
    protocols: list[str] = Field(default_factory=list)  # every protocol it speaks
    base_url: str = ""  # the protocol's root (OpenAI: ending in /v1); "" = deployment-specific
    base_url_hint: str = ""  # how to find it when there is no fixed one
    auth: Auth
    model_ids: str = Field(min_length=1)  # the model-id convention, in words
    example_models: list[str] = Field(default_factory=list)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    usage: str = Field(min_length=1)  # where usage appears in a stream
    reasoning: str = ""  # where reasoning text appears ("" = none documented)
    server_timings: str = ""  # where the server's own timings appear
    rejects: list[str] = Field(default_factory=list)  # parameters documented as rejected
    ignores: list[str] = Field(default_factory=list)  # parameters documented as ignored
    notes: list[str] = Field(default_factory=list)  # other parameter gaps
    target: dict[str, Any] = Field(default_factory=dict)  # TargetSpec defaults
    metrics: MetricsNames | None = None
    prices: Prices | None = None
    limits: Limits | None = None
    ratelimit_headers: RateLimitHeaders | None = None
    docs: list[str] = Field(default_factory=list)

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, v: str) -> str:
        if v not in PROTOCOLS:
            raise ValueError(f"unknown protocol {v!r} (known: {', '.join(PROTOCOLS)})")
        return v

    @field_validator("target")
    @classmethod
    def _target_fields(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(v) - TARGET_DEFAULT_FIELDS)
        if unknown:
            raise ValueError(f"a preset cannot set target field(s) {', '.join(unknown)}")
        return v

    def target_defaults(self) -> dict[str, Any]:
        """The `[target]` fields this preset fills in when the spec leaves them out."""
        out: dict[str, Any] = {"api": self.protocol, "max_tokens_field": self.max_tokens_field}
        if self.base_url:
            out["base_url"] = self.base_url
        if self.auth.env and self.auth.scheme == "bearer":
            out["api_key_env"] = self.auth.env
        out.update(self.target)
        return out


def preset_names() -> list[str]:
    root = resources.files("loadgen") / "presets"
    return sorted(p.name.removesuffix(".toml") for p in root.iterdir() if p.name.endswith(".toml"))


@cache
def load_preset(name: str) -> Preset:
    """The named preset, validated; `SpecError` naming the file when it is unknown or bad."""
    names = preset_names()
    if name not in names:
        raise SpecError(f"unknown preset {name!r} (known: {', '.join(names)})", "target.preset")
    where = f"loadgen/presets/{name}.toml"
    text = (resources.files("loadgen") / "presets" / f"{name}.toml").read_text(encoding="utf-8")
    try:
        preset = Preset.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise SpecError(f"invalid preset: {exc}", where) from None
    if preset.name != name:
        raise SpecError(f"name is {preset.name!r}, the file says {name!r}", where)
    return preset


def all_presets() -> list[Preset]:
    return [load_preset(n) for n in preset_names()]


def apply_preset(target: dict[str, Any]) -> dict[str, Any]:
    """A spec's `[target]` table with its preset's defaults under it (the spec wins)."""
    name = target.get("preset")
    if name is None:
        return target
    if not isinstance(name, str):
        raise SpecError("must be a preset name", "target.preset")
    merged = dict(load_preset(name).target_defaults())
    merged.update(target)
    return merged
