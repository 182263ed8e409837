"""The `[load]` table: one load model (concurrency levels, rates, a ramp, a trace or a saturation
search), each level's window and what happens between levels."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from loadgen.runspec.fields import (
    DEFAULT_VERDICT_CONFIDENCE,
    MAX_DURATION_S,
    MAX_RATE,
    MAX_SEED,
    Strict,
)
from loadgen.runspec.spec_bounds import search_bounds_error

DEFAULT_MAX_REQUESTS = 1_000_000
# Tokens per hash id of a Mooncake trace (the format's block size: its hash_ids name 512-token
# blocks of the prompt, the same id the same block).
MOONCAKE_BLOCK_TOKENS = 512
# The layouts a trace file may have: peakload's own JSONL and the public traces (engine/traces.py)
TraceFormat = Literal["auto", "peakload", "mooncake", "burstgpt", "azure"]


class SaturationSpec(Strict):
    """Search for the highest level meeting the spec's SLOs by doubling then bisecting."""

    start: float = Field(gt=0, le=MAX_RATE)
    max: float = Field(gt=0, le=MAX_RATE)
    max_steps: int = Field(default=8, ge=1, le=32)
    tolerance: float = Field(default=0.1, gt=0, lt=1)  # relative width at which the search stops
    # each level is decided by the exact binomial rule of `peakload sla` at this confidence; a
    # level not yet decided runs again (its samples pooled) up to `max_extensions` more times
    confidence: float = Field(default=DEFAULT_VERDICT_CONFIDENCE, gt=0.5, lt=1)
    max_extensions: int = Field(default=2, ge=0, le=16)

    @model_validator(mode="after")
    def _ordered(self) -> SaturationSpec:
        if (problem := search_bounds_error(self.start, self.max)) is not None:
            raise ValueError(problem)
        return self


class RampSpec(Strict):
    """Open-loop rate rising linearly from `from_rate` to `to_rate` over the level's duration."""

    from_rate: float = Field(ge=0, le=MAX_RATE)
    to_rate: float = Field(gt=0, le=MAX_RATE)


class LoadSpec(Strict):
    concurrency: list[int] | None = None
    rate: list[float] | None = None  # requests/s, open loop
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0, le=1e6)  # gamma shape; 1.0 = Poisson
    ramp: RampSpec | None = None
    trace: str | None = None  # JSONL: {"t": seconds, "prompt_tokens": n, "output_tokens": m}
    # The trace file's layout ("auto": told from its first line; loadgen.engine.traces), the
    # factor its times are divided by, and the window of its own time replayed
    # [trace_start_s, trace_start_s + trace_duration_s), shifted to start at 0.
    trace_format: TraceFormat = "auto"
    trace_speedup: float = Field(default=1.0, gt=0, le=1e6)
    trace_start_s: float = Field(default=0.0, ge=0, le=1e10)
    trace_duration_s: float | None = Field(default=None, gt=0, le=1e10)
    trace_block_tokens: int = Field(default=MOONCAKE_BLOCK_TOKENS, ge=1, le=1 << 20)
    saturation: SaturationSpec | None = None
    duration_s: float = Field(gt=0, le=MAX_DURATION_S)
    warmup_s: float = Field(default=0.0, ge=0)
    cooldown_s: float = Field(default=0.0, ge=0)
    think_time_s: float = Field(default=0.0, ge=0, le=MAX_DURATION_S)
    max_requests: int = Field(default=DEFAULT_MAX_REQUESTS, ge=1, le=1 << 40)
    max_concurrency: int = Field(default=4096, ge=1)  # the run's in-flight cap (open loop)
    # What happens to a level's requests still running when its window ends: "drain" waits for
    # them (bounded by target.deadline_s) before the next level starts, so each level is
    # measured alone; "cancel" ends them as `cancelled` (partial tokens kept); "overlap" starts
    # the next level at once, its load inflated by the stragglers.
    between_levels: Literal["drain", "cancel", "overlap"] = "drain"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)

    @field_validator("concurrency")
    @classmethod
    def _positive_users(cls, v: list[int] | None) -> list[int] | None:
        if v is not None:
            if not v:
                raise ValueError("needs at least one level")
            for i, c in enumerate(v):
                if c < 1:
                    raise ValueError(f"level {i} is {c}: concurrency must be at least 1")
        return v

    @field_validator("rate")
    @classmethod
    def _positive_rates(cls, v: list[float] | None) -> list[float] | None:
        if v is not None:
            if not v:
                raise ValueError("needs at least one level")
            for i, r in enumerate(v):
                if not (r > 0 and math.isfinite(r)):
                    raise ValueError(f"level {i} is {r}: a rate must be positive (requests/s)")
                if r > MAX_RATE:
                    raise ValueError(
                        f"level {i} is {r:g} requests/s: more than {MAX_RATE:,.0f} is not a rate "
                        "one machine can send"
                    )
        return v

    @model_validator(mode="after")
    def _one_model(self) -> LoadSpec:
        chosen = [
            n
            for n, v in (
                ("concurrency", self.concurrency),
                ("rate", self.rate),
                ("ramp", self.ramp),
                ("trace", self.trace),
                ("saturation", self.saturation),
            )
            if v is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                "choose exactly one load model: concurrency, rate, ramp, trace or saturation"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        if self.trace is None:
            set_here = [n for n in _TRACE_OPTIONS if getattr(self, n) != _TRACE_DEFAULTS[n]]
            if set_here:
                raise ValueError(f"{', '.join(set_here)} apply only with load.trace")
        if self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(
                f"warmup_s + cooldown_s ({self.warmup_s + self.cooldown_s}) must be shorter than "
                f"duration_s ({self.duration_s})"
            )
        return self


_TRACE_OPTIONS = (
    "trace_format",
    "trace_speedup",
    "trace_start_s",
    "trace_duration_s",
    "trace_block_tokens",
)
_TRACE_DEFAULTS = {n: LoadSpec.model_fields[n].default for n in _TRACE_OPTIONS}
