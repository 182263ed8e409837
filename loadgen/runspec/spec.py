"""Run specs: TOML parsed into a validated `RunSpec`. Errors name the file, the field and what is
wrong. The minimal spec in the README is valid as written; every richer form extends it. Each
table has its module: target_spec, workload_spec (with lengths), load_spec; this one holds the
SLOs, regions, labels, validity bounds and the run as a whole.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadgen.errors import SpecError
from loadgen.runspec.cost import CostSpec, fill_prices
from loadgen.runspec.fields import DEFAULT_VERDICT_CONFIDENCE, Strict
from loadgen.runspec.lengths import LENGTH_TAGS
from loadgen.runspec.load_spec import LoadSpec
from loadgen.runspec.pacing import PacingSpec
from loadgen.runspec.redact import redact_spec
from loadgen.runspec.target_spec import SPEECH_API, TRANSCRIPTION_API, TargetSpec
from loadgen.runspec.workload_spec import WorkloadSpec


class SLO(Strict):
    # ttfab_ms, audio_rtf: the speech workloads' (loadgen.results.audio_formulas)
    metric: Literal["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms", "ttfab_ms", "audio_rtf"]
    percentile: float = Field(gt=0, lt=100)
    threshold: float = Field(gt=0, le=1e12)


class Region(Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    share: float = Field(gt=0, le=1)
    workers: int = Field(default=1, ge=1, le=256)


class Labels(BaseModel):
    """The test matrix that makes two runs comparable. Unknown keys are kept as extra labels."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str | None = None
    revision: str | None = None
    quantization: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    hardware: str | None = None
    chat_template: str | None = None
    generation: dict[str, Any] = Field(default_factory=dict)


DEFAULT_REGION = "local"
# a run that lost more than 1% of its requests is not a pass unless its spec says so
DEFAULT_MAX_ERROR_RATE = 0.01
DEFAULT_MAX_LOAD_SHORTFALL = 0.05  # see ValiditySpec.max_load_shortfall


class ValiditySpec(Strict):
    """Self-check bounds: past these, the generator, not the server, shaped the numbers."""

    # the bound on a token stamp's error: the loop's lag p99 with user-space stamps; with
    # kernel stamps, the spread of tokens read together (loadgen/engine/health.py)
    max_loop_lag_p99_ms: float = Field(default=2.0, gt=0)
    max_dispatch_delay_p99_ms: float = Field(default=5.0, gt=0)
    max_cpu_percent: float = Field(default=90.0, gt=0)
    # a level whose achieved load (mean in flight, or sent req/s) falls short of the configured
    # load by more than this fraction did not deliver the load it claims to measure
    max_load_shortfall: float = Field(default=DEFAULT_MAX_LOAD_SHORTFALL, ge=0, lt=1)


class RunSpec(Strict):
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    target: TargetSpec
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    load: LoadSpec
    slos: list[SLO] = Field(default_factory=list)
    # the run's pass criteria besides the SLOs (judged by analysis.verdicts.verdict): the largest
    # share of steady-phase requests that may fail, and the confidence of every verdict
    max_error_rate: float = Field(default=DEFAULT_MAX_ERROR_RATE, ge=0, le=1)
    confidence: float = Field(default=DEFAULT_VERDICT_CONFIDENCE, gt=0.5, lt=1)
    regions: list[Region] = Field(default_factory=lambda: [Region(name=DEFAULT_REGION, share=1.0)])
    labels: Labels = Field(default_factory=Labels)
    validity: ValiditySpec = Field(default_factory=ValiditySpec)
    store_content: bool = False  # store prompt and response text (off by default)
    cost: CostSpec = Field(default_factory=CostSpec)  # prices, dated; see loadgen.runspec.cost
    # provider limits; loadgen.runspec.pacing
    pacing: PacingSpec = Field(default_factory=PacingSpec)

    @model_validator(mode="before")
    @classmethod
    def _prices_from_preset(cls, data: Any) -> Any:
        return fill_prices(data)

    @model_validator(mode="after")
    def _regions_consistent(self) -> RunSpec:
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise ValueError(f"region names repeat: {names}")
        total = sum(r.share for r in self.regions)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"region shares must add up to 1 (they add up to {total:g})")
        if self.load.saturation is not None and not self.slos:
            raise ValueError("a saturation search needs [[slos]] to decide what 'meets' means")
        return self

    @model_validator(mode="after")
    def _audio_fits_the_api(self) -> RunSpec:
        api, w = self.target.api, self.workload
        if w.audio is not None and api not in (SPEECH_API, TRANSCRIPTION_API):
            raise ValueError(
                f"[workload.audio] is for {SPEECH_API} or {TRANSCRIPTION_API}, not {api}"
            )
        if api in (SPEECH_API, TRANSCRIPTION_API) and (w.sessions or w.output):
            raise ValueError(f"{api} takes neither multi-turn sessions nor structured output")
        if api == TRANSCRIPTION_API and w.dataset is not None:
            raise ValueError(
                "a transcription workload sends audio: workload.audio.files, not a dataset"
            )
        if api == TRANSCRIPTION_API:  # before the run: its shards read or make the clips
            files = w.audio.files if w.audio is not None else None
            if files is not None and not Path(files).is_dir():
                raise ValueError(f"workload.audio.files: {files} is not a folder")
            if files is None and shutil.which("espeak-ng") is None:
                raise ValueError(
                    "speech-in clips are spoken by espeak-ng, which is not installed "
                    "(apt-get install espeak-ng), or give workload.audio.files"
                )
        return self

    def public_dict(self) -> dict[str, Any]:
        """The spec as stored and planned: keys are only env var names, and every header value
        or query parameter not declared public is replaced (loadgen.runspec.secrets)."""
        return redact_spec(self.model_dump(mode="json"))


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in LENGTH_TAGS:
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def _hostile(value: Any, loc: str) -> str | None:
    """The first place in raw spec data holding what no store can keep: a NUL character
    (PostgreSQL text and jsonb refuse it) or a float that is not finite (JSON has none)."""
    if isinstance(value, str):
        return f"{loc}: a NUL character is not allowed" if "\x00" in value else None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{loc}: {value} is not a finite number"
    items: Any = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for k, v in items:
        if isinstance(k, str) and "\x00" in k:
            return f"{loc or '(top level)'}: a NUL character in a key is not allowed"
        sub = f"{loc}[{k}]" if isinstance(k, int) else (f"{loc}.{k}" if loc else str(k))
        found = _hostile(v, sub)
        if found:
            return found
    return None


def spec_from_dict(data: dict[str, Any], where: str = "spec") -> RunSpec:
    found = _hostile(data, "")
    if found:
        raise SpecError(found, where=where)

    from loadgen.runspec.presets import apply_preset  # presets validate against this module's types

    if isinstance(data.get("target"), dict) and "preset" in data["target"]:
        data = {**data, "target": apply_preset(data["target"])}
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = _format_loc(tuple(err["loc"]))
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
            lines.append(f"{loc or '(top level)'}: {msg}")
        raise SpecError("; ".join(lines), where=where, problems=lines) from None
