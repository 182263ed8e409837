"""What a load costs: the spec's `[cost]` table (per-token prices, dated, filled in from the
target's preset when the spec names none; or a self-hosted price per GPU-hour), and the pure
arithmetic every reader uses — cost of a token count, cost per million tokens at a throughput,
and the break-even throughput between renting GPUs and paying per token. USD throughout.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.errors import SpecError

MTOK = 1_000_000
S_PER_H = 3600.0


class CostSpec(BaseModel):
    """`[cost]`: per-token prices (`input_per_mtok`, `output_per_mtok`, with `as_of` and
    `source`; or those of `price_preset` for `price_model`, by default the target's preset and
    model), a self-hosted price (`gpu_hourly_usd` x `gpus`), or both. With an hourly price the
    run cost its hours, and per-token prices are the alternative the break-even is against.
    `max_cost_usd` caps the estimated cost of a run against a hosted preset;
    `confirm_over_limits = true` lets a run past that cap or the preset's published limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float | None = Field(default=None, ge=0)
    output_per_mtok: float | None = Field(default=None, ge=0)
    as_of: dt.date | None = None
    source: str = ""  # "spec" when written in the spec, else the preset it came from
    price_preset: str | None = None
    price_model: str | None = None
    # speech models billed by their audio (Groq's Whisper): USD per hour of audio, the audio
    # being each answered request's `audio_ms` (loadgen.results.records)
    audio_per_hour: float | None = Field(default=None, ge=0)
    gpu_hourly_usd: float | None = Field(default=None, gt=0)
    gpus: int = Field(default=1, ge=1, le=100_000)
    max_cost_usd: float | None = Field(default=None, gt=0)
    confirm_over_limits: bool = False

    @model_validator(mode="after")
    def _prices_paired(self) -> CostSpec:
        if (self.input_per_mtok is None) != (self.output_per_mtok is None):
            raise ValueError("input_per_mtok and output_per_mtok go together")
        return self

    @property
    def per_token(self) -> bool:
        return self.input_per_mtok is not None and self.output_per_mtok is not None

    @property
    def hourly_usd(self) -> float | None:
        """The self-hosted price of the whole deployment per hour (all its GPUs)."""
        return None if self.gpu_hourly_usd is None else self.gpu_hourly_usd * self.gpus


def fill_prices(data: Any) -> Any:
    """A spec dict with `[cost]` per-token prices taken from its target's preset (price of the
    spec's model, with the preset's date and source) when the spec gives none. Stored with the
    run, so a later price change never rewrites an old run's cost."""
    if not isinstance(data, dict):
        return data
    target = data.get("target")
    cost = data.get("cost")
    if not isinstance(target, dict) or (cost is not None and not isinstance(cost, dict)):
        return data
    cost = dict(cost or {})
    if "input_per_mtok" in cost or "output_per_mtok" in cost or "audio_per_hour" in cost:
        cost.setdefault("source", "spec")
        return {**data, "cost": cost}
    preset = cost.get("price_preset") or target.get("preset")
    model = cost.get("price_model") or target.get("model")
    if not isinstance(preset, str):
        return data
    from loadgen.runspec.presets import load_preset

    try:
        prices = load_preset(preset).prices
    except SpecError:
        if "price_preset" in cost:
            raise
        return data  # the target's preset error is reported where the target is validated
    price = prices.models.get(str(model)) if prices is not None else None
    if prices is None or price is None:
        if "price_preset" in cost:
            known = ", ".join(sorted(prices.models)) if prices else "none"
            raise SpecError(
                f"preset {preset!r} publishes no price for model {model!r} (priced: {known})",
                "cost.price_model",
            )
        return data
    if price.input_per_mtok is not None:
        cost.update(input_per_mtok=price.input_per_mtok, output_per_mtok=price.output_per_mtok)
    if price.audio_per_hour is not None:
        cost.setdefault("audio_per_hour", price.audio_per_hour)
    cost.update(as_of=prices.as_of, source=f"preset {preset}: {prices.source}")
    return {**data, "cost": cost}


def token_cost_usd(input_tokens: float, output_tokens: float, cost: CostSpec) -> float | None:
    """Per-token billing of a token count; None without per-token prices."""
    if not cost.per_token:
        return None
    assert cost.input_per_mtok is not None and cost.output_per_mtok is not None
    return (input_tokens * cost.input_per_mtok + output_tokens * cost.output_per_mtok) / MTOK


def audio_cost_usd(audio_seconds: float, cost: CostSpec) -> float | None:
    """Billing by the hour of audio: audio_per_hour x audio seconds / 3600; None without it."""
    if cost.audio_per_hour is None:
        return None
    return cost.audio_per_hour * audio_seconds / S_PER_H


def per_audio_hour_at(audio_s_per_s: float, cost: CostSpec) -> float | None:
    """Self-hosted USD per hour of audio when the deployment delivers (or transcribes)
    `audio_s_per_s` audio seconds per wall second: hourly / audio_s_per_s."""
    hourly = cost.hourly_usd
    if hourly is None or not audio_s_per_s > 0:
        return None
    return hourly / audio_s_per_s


def hosted_cost_usd(seconds: float, cost: CostSpec) -> float | None:
    """Self-hosted cost of `seconds` of the deployment; None without an hourly price."""
    hourly = cost.hourly_usd
    return None if hourly is None else hourly * seconds / S_PER_H


def per_mtok_at(throughput_tok_s: float, cost: CostSpec) -> float | None:
    """Self-hosted USD per million tokens when the deployment delivers `throughput_tok_s`
    tokens/s (all its cost charged to these tokens); None without a price or throughput."""
    hourly = cost.hourly_usd
    if hourly is None or not throughput_tok_s > 0:
        return None
    return hourly / (throughput_tok_s * S_PER_H) * MTOK


def blended_per_mtok_output(
    input_tokens: float, output_tokens: float, cost: CostSpec
) -> float | None:
    """Per-token billing per million output tokens with this load's input attached: output
    price + input price x (input / output tokens)."""
    if not cost.per_token or not output_tokens > 0:
        return None
    assert cost.input_per_mtok is not None and cost.output_per_mtok is not None
    return cost.output_per_mtok + cost.input_per_mtok * input_tokens / output_tokens


def break_even_output_tok_s(
    input_tokens: float, output_tokens: float, cost: CostSpec
) -> float | None:
    """Output tokens/s, averaged over the hours paid, at which the self-hosted deployment
    costs what per-token billing would for the same load shape: hourly / (blended price per
    output token x 3600). Below it per-token billing is cheaper; above it, the rented GPUs."""
    hourly = cost.hourly_usd
    blended = blended_per_mtok_output(input_tokens, output_tokens, cost)
    if hourly is None or blended is None or not blended > 0:
        return None
    return hourly * MTOK / (blended * S_PER_H)
