"""Before a run against a hosted provider: what it will send (requests, tokens, cost, from the
spec alone) and whether that stays inside the preset's published limits and the spec's
`max_cost_usd`. `guard` refuses a load past them unless `[cost] confirm_over_limits = true`;
pacing (`[pacing] enabled`) answers the per-minute limits, never the daily one or the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadgen.errors import SpecError
from loadgen.runspec.cost import audio_cost_usd, token_cost_usd
from loadgen.runspec.lengths import (
    FixedLength,
    LengthDist,
    LognormalLength,
    NormalLength,
    UniformLength,
)
from loadgen.runspec.pacing import effective_limits
from loadgen.runspec.presets import Limits, load_preset
from loadgen.runspec.spec import RunSpec
from loadgen.runspec.workload_spec import DEFAULT_SPEAK_SECONDS


def mean_length(d: LengthDist) -> float:
    """Expected value of a length distribution, before clipping (tokens)."""
    if isinstance(d, FixedLength):
        return float(d.value)
    if isinstance(d, UniformLength):
        return (d.min + d.max) / 2
    if isinstance(d, NormalLength):
        return max(float(d.min), d.mean)
    if isinstance(d, LognormalLength):
        return d.median * math.exp(d.sigma**2 / 2)
    raise TypeError(type(d).__name__)


@dataclass(slots=True)
class Estimate:
    """What the spec will send: None where the spec alone cannot say (closed loop without a
    measured request time, saturation search, trace)."""

    requests: float | None
    peak_requests_per_minute: float | None
    input_tokens: float | None
    output_tokens: float | None
    peak_tokens_per_minute: float | None
    cost_usd: float | None
    problems: list[str] = field(default_factory=list)
    pacing: bool = False  # [pacing] is on
    paced: tuple[float | None, float | None] = (None, None)  # effective rpm, tpm named

    def lines(self) -> list[str]:
        def n(x: float | None, unit: str) -> str:
            return "unknown" if x is None else f"{x:,.0f} {unit}"

        out = [
            f"estimated: {n(self.requests, 'requests')}, {n(self.input_tokens, 'input')} + "
            f"{n(self.output_tokens, 'output tokens')}, "
            f"peak {n(self.peak_requests_per_minute, 'requests/min')}"
            + (
                f", cost ${self.cost_usd:,.4f}"
                if self.cost_usd is not None
                else ", cost unknown (no price)"
            )
        ]
        if self.pacing:
            rpm, tpm = self.paced
            out.append(
                f"paced to {f'{rpm:,.1f}' if rpm else 'the advertised'} requests/min, "
                f"{f'{tpm:,.0f}' if tpm else 'the advertised'} tokens/min"
                + ("" if rpm and tpm else " (x-ratelimit-limit-* x headroom, once a response says)")
            )
        return out


def estimate(spec: RunSpec, request_s: float | None = None) -> Estimate:
    """Requests and tokens the spec will send: open loop, rate x duration per level (a ramp at
    its mean rate); closed loop, users x duration / `request_s` (a measured request time) when
    given; capped by max_requests. Tokens: requests x mean prompt and output lengths."""
    load = spec.load
    rates: list[float] | None = None
    if load.rate is not None:
        rates = list(load.rate)
    elif load.ramp is not None:
        rates = [(load.ramp.from_rate + load.ramp.to_rate) / 2]
    elif load.concurrency is not None and request_s and request_s > 0:
        rates = [u / request_s for u in load.concurrency]
    requests = peak = None
    if rates is not None:
        requests = min(float(load.max_requests), sum(r * load.duration_s for r in rates))
        peak = max(rates) * 60.0
        if load.ramp is not None:
            peak = load.ramp.to_rate * 60.0
    per_in = mean_length(spec.workload.prompt_tokens)
    per_out = mean_length(spec.workload.output_tokens)
    tin = requests * per_in if requests is not None else None
    tout = requests * per_out if requests is not None else None
    cost = token_cost_usd(tin, tout, spec.cost) if tin is not None and tout is not None else None
    audio = spec.workload.audio
    if cost is None and requests is not None and spec.cost.audio_per_hour is not None:
        # speech billed per audio hour: the clips espeak-ng will speak (a folder's: unknown)
        seconds = audio.speak_seconds if audio is not None else [DEFAULT_SPEAK_SECONDS[0]]
        if seconds is not None and (audio is None or audio.files is None):
            cost = audio_cost_usd(requests * sum(seconds) / len(seconds), spec.cost)
    return Estimate(
        requests=requests,
        peak_requests_per_minute=peak,
        input_tokens=tin,
        output_tokens=tout,
        peak_tokens_per_minute=peak * (per_in + per_out) if peak is not None else None,
        cost_usd=cost,
    )


def _limit_problems(est: Estimate, limits: Limits, paced: bool, preset: str) -> list[str]:
    out = []
    tier = f"{preset} {limits.tier or 'published'} tier"
    if limits.requests_per_minute and not paced:
        peak = est.peak_requests_per_minute
        if peak is None:
            out.append(
                f"{tier} allows {limits.requests_per_minute} requests/min and this load's rate is "
                "unknown before it runs (closed loop): enable [pacing] or confirm"
            )
        elif peak > limits.requests_per_minute:
            out.append(
                f"peak {peak:,.0f} requests/min exceeds the {tier}'s "
                f"{limits.requests_per_minute} requests/min"
            )
    tpm = est.peak_tokens_per_minute
    if (
        limits.tokens_per_minute
        and not paced
        and tpm is not None
        and tpm > limits.tokens_per_minute
    ):
        out.append(
            f"peak {tpm:,.0f} tokens/min exceeds the {tier}'s {limits.tokens_per_minute} tokens/min"
        )
    tokens = (
        est.input_tokens + est.output_tokens
        if est.input_tokens is not None and est.output_tokens is not None
        else None
    )
    if limits.tokens_per_day and tokens is not None and tokens > limits.tokens_per_day:
        out.append(f"{tokens:,.0f} tokens exceed the {tier}'s {limits.tokens_per_day} tokens/day")
    n = est.requests
    if limits.requests_per_day and n is not None and n > limits.requests_per_day:
        out.append(f"{n:,.0f} requests exceed the {tier}'s {limits.requests_per_day} requests/day")
    return out


def check(spec: RunSpec, request_s: float | None = None) -> Estimate:
    """The estimate with every reason to refuse (`problems`); empty for non-hosted targets
    unless the spec sets max_cost_usd."""
    est = estimate(spec, request_s)
    name = spec.target.preset
    preset = load_preset(name) if name else None
    limits = preset.limits if preset is not None else None
    if spec.pacing.enabled:
        est.paced = effective_limits(
            spec.pacing,
            float(limits.requests_per_minute) if limits and limits.requests_per_minute else None,
            float(limits.tokens_per_minute) if limits and limits.tokens_per_minute else None,
        )
        est.pacing = True  # where no limit is named, the provider's advertised ones pace it
    if preset is not None and preset.kind == "hosted" and limits is not None:
        est.problems += _limit_problems(est, limits, spec.pacing.enabled, preset.name)
    cap = spec.cost.max_cost_usd
    if cap is not None:
        if est.cost_usd is None:
            est.problems.append(
                f"max_cost_usd is {cap:g} but this run's cost cannot be estimated "
                "(no per-token price, or its request count is unknown before it runs)"
            )
        elif est.cost_usd > cap:
            est.problems.append(f"estimated cost ${est.cost_usd:,.4f} exceeds max_cost_usd {cap:g}")
    return est


def guard(spec: RunSpec, request_s: float | None = None) -> Estimate:
    """`check`, raising SpecError (one message, every reason) unless the spec confirms."""
    est = check(spec, request_s)
    unconfirmable = [p for p in est.problems if p.startswith("[pacing]")]
    if unconfirmable or (est.problems and not spec.cost.confirm_over_limits):
        raise SpecError(
            "; ".join(est.problems)
            + ("" if unconfirmable else " (set [cost] confirm_over_limits = true to run anyway)"),
            "load",
        )
    return est
