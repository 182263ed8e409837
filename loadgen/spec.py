"""Run specs: TOML parsed into a validated `RunSpec`. Errors name the file, the field and what is
wrong. The minimal spec in the README is valid as written; every richer form extends it.
"""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from loadgen.cost import CostSpec, fill_prices
from loadgen.errors import SpecError
from loadgen.pacing import PacingSpec
from loadgen.secrets import redact_spec

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_DEADLINE_S = 300.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
MAX_DEADLINE_S = 1800.0  # chunk offsets are stored as int32 µs: 35 minutes at most
DEFAULT_MAX_REQUESTS = 1_000_000
# of every verdict on a run's criteria, SLA claims and a saturation search's levels
# (analysis.verdicts.sla uses it too)
DEFAULT_VERDICT_CONFIDENCE = 0.99
# Bounds past which a value is a typo, not a test: they keep every later int(seconds * 1e9),
# sample and allocation finite (a week-long level, 16 M tokens, a million requests/s).
MAX_DURATION_S = 7 * 86400.0
MAX_TIMEOUT_S = 3600.0
MAX_TOKENS = 1 << 24
MAX_RATE = 1_000_000.0
MAX_SEED = (1 << 64) - 1
# An HTTP header name is an RFC 9110 token: "authorization " (a stray space) is not one.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_PARAM = re.compile(r"key|token|secret|passw|auth|sig|credential", re.IGNORECASE)


class _Strict(BaseModel):
    # strict: TOML gives native types, so `true` is never a count and "8" never a number;
    # no inf/nan: every duration and rate becomes an integer of ns or a finite schedule
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# ---------------------------------------------------------------- lengths


class FixedLength(_Strict):
    dist: Literal["fixed"] = "fixed"
    value: int = Field(ge=1, le=MAX_TOKENS)


class UniformLength(_Strict):
    dist: Literal["uniform"]
    min: int = Field(ge=1, le=MAX_TOKENS)
    max: int = Field(ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


def _bounds_ordered(lo: int, hi: int | None) -> None:
    """Clamping every draw to `max` when `min > max` would silently make a fixed length."""
    if hi is not None and hi < lo:
        raise ValueError(f"max ({hi}) is below min ({lo})")


class NormalLength(_Strict):
    dist: Literal["normal"]
    mean: float = Field(gt=0, le=MAX_TOKENS)
    std: float = Field(ge=0, le=MAX_TOKENS)
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> NormalLength:
        _bounds_ordered(self.min, self.max)
        return self


class LognormalLength(_Strict):
    """Lognormal by the median and sigma of the underlying normal (`ln`-space std)."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(ge=0, le=10)  # e**10 = 22,026 times the median already
    min: int = Field(default=1, ge=1, le=MAX_TOKENS)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        _bounds_ordered(self.min, self.max)
        return self


LengthDist = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength, Field(discriminator="dist")
]


def _coerce_length(value: Any) -> Any:
    """A bare integer means a fixed length."""
    if isinstance(value, bool):
        raise ValueError("a length must be an integer or a table with `dist`")
    if isinstance(value, int):
        return {"dist": "fixed", "value": value}
    return value


# ---------------------------------------------------------------- target


class TargetSpec(_Strict):
    # a name from `loadgen/presets/`: its target defaults fill what this table leaves out
    preset: str | None = None
    # the wire API (loadgen.targets.apis): OpenAI's, or an engine's native one
    api: Literal[
        "openai-chat",
        "openai-completions",
        "openai-responses",
        "ollama-chat",
        "ollama-generate",
        "tgi-generate",
        "llamacpp-completion",
        "triton-generate",
    ]
    base_url: str
    model: str = Field(min_length=1)
    api_key_env: str | None = Field(
        default=None, description="name of the environment variable holding the key"
    )
    # Providers that take the key in the query (`?key=...`) name the parameter here; the key
    # itself still comes only from `api_key_env`, and is never stored with the URL.
    api_key_query: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    stream: bool = True
    include_usage: bool = True
    ignore_eos: bool = False
    # Header values and query parameters are secrets unless declared otherwise: the stored
    # spec, shard plans, logs and reports keep their names with the value replaced (see
    # loadgen.secrets). `headers_env` gives a header's value by reference (header -> variable).
    headers: dict[str, str] = Field(default_factory=dict)
    headers_env: dict[str, str] = Field(default_factory=dict)
    public_headers: list[str] = Field(default_factory=list)
    public_query: list[str] = Field(default_factory=list)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    connect_timeout_s: float = Field(default=DEFAULT_CONNECT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    deadline_s: float = Field(default=DEFAULT_DEADLINE_S, gt=0, le=MAX_DEADLINE_S)
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    metrics_url: str | None = None  # Prometheus endpoint to scrape during the run
    # the HTTP client: "raw" (asyncio sockets, kernel receive stamps) or "httpx"; "auto" = raw
    transport: Literal["auto", "raw", "httpx"] = "auto"
    # the output cap's name in the body: newer OpenAI-style APIs deprecate `max_tokens`
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"

    @field_validator("base_url")
    @classmethod
    def _http_only(cls, v: str) -> str:
        if not (v.startswith("http://") or v.startswith("https://")):
            raise ValueError(f"must start with http:// or https:// (got {v!r})")
        if "@" in v.split("/")[2]:
            raise ValueError("credentials in the URL are not allowed; use api_key_env")
        if "#" in v:
            raise ValueError(
                "a URL fragment (#...) is never sent to a server and would swallow the API "
                "path; remove it (a key goes in api_key_env)"
            )
        query = urlsplit(v).query
        for name, _ in parse_qsl(query, keep_blank_values=True):
            if _SECRET_PARAM.search(name):
                raise ValueError(
                    f"query parameter {name!r} looks like a credential and would be stored with "
                    "the spec; name the key with api_key_env and its parameter with api_key_query"
                )
        return v.rstrip("/")

    @field_validator("headers", "headers_env", "public_headers")
    @classmethod
    def _header_names(cls, v: Any) -> Any:
        for name in v:
            if not _HEADER_NAME.match(name):
                raise ValueError(
                    f"{name!r} is not an HTTP header name (letters, digits and !#$%&'*+.^_`|~- "
                    "only; no spaces)"
                )
        return v

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if name.lower() in {"authorization", "x-api-key", "api-key"}:
                raise ValueError(
                    f"header {name!r} would store a secret in the spec; use api_key_env"
                )
            if any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise ValueError(f"header {name!r} has a control character in its value")
        return v

    @field_validator("headers_env")
    @classmethod
    def _header_env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, env in v.items():
            if not _ENV_NAME.match(env):
                raise ValueError(f"header {name!r}: {env!r} is not an environment variable name")
        return v

    @model_validator(mode="after")
    def _query_key_needs_env(self) -> TargetSpec:
        if self.api_key_query and not self.api_key_env:
            raise ValueError(
                "api_key_query names where the key goes; api_key_env must name the key"
            )
        both = {n.lower() for n in self.headers} & {n.lower() for n in self.headers_env}
        if both:
            raise ValueError(f"header(s) {sorted(both)} given both in headers and headers_env")
        return self

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and (not v or not v.replace("_", "").isalnum()):
            raise ValueError(f"must be an environment variable name, got {v!r}")
        return v


# ---------------------------------------------------------------- workload


class OutputSpec(_Strict):
    """Structured output asked of every request: JSON fitting `json_schema` (sent as
    `response_format`), or a call of one of `tools` (forced by `tool_choice`). An answer that
    breaks the schema counts as a failed request (outcome stream_error, phase `schema`)."""

    json_schema: dict[str, Any] | None = None
    schema_name: str = Field(default="output", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] = "required"

    @model_validator(mode="after")
    def _one(self) -> OutputSpec:
        if (self.json_schema is None) == (self.tools is None):
            raise ValueError("give either json_schema or tools")
        return self


class WorkloadSpec(_Strict):
    prompt_tokens: LengthDist = Field(default_factory=lambda: FixedLength(value=128))
    output_tokens: LengthDist = Field(default_factory=lambda: FixedLength(value=128))
    shared_prefix_fraction: float = Field(default=0.0, ge=0, le=1)
    dataset: str | None = None  # JSONL with "prompt" (and optional "output_tokens") per line
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    system_prompt: str | None = None
    sessions: SessionSpec | None = None
    output: OutputSpec | None = None  # structured output (JSON schema or a tool call)

    _coerce_prompt = field_validator("prompt_tokens", "output_tokens", mode="before")(
        _coerce_length
    )


class SessionSpec(_Strict):
    """Multi-turn chat: each session sends `turns` requests whose context grows."""

    turns: int = Field(ge=1, le=1000)
    user_tokens_per_turn: LengthDist = Field(default_factory=lambda: FixedLength(value=64))

    _coerce = field_validator("user_tokens_per_turn", mode="before")(_coerce_length)


WorkloadSpec.model_rebuild()


# ---------------------------------------------------------------- load


class SaturationSpec(_Strict):
    """Search for the highest level meeting the spec's SLOs by doubling then bisecting."""

    start: float = Field(gt=0, le=MAX_RATE)
    max: float = Field(gt=0, le=MAX_RATE)
    max_steps: int = Field(default=8, ge=1, le=32)
    tolerance: float = Field(default=0.1, gt=0, lt=1)  # relative width at which the search stops
    # each level is decided by the exact binomial rule of `peakload sla` at this confidence; a
    # level not yet decided runs again (its samples pooled) up to `max_extensions` more times
    confidence: float = Field(default=DEFAULT_VERDICT_CONFIDENCE, gt=0.5, lt=1)
    max_extensions: int = Field(default=2, ge=0, le=16)


class RampSpec(_Strict):
    """Open-loop rate rising linearly from `from_rate` to `to_rate` over the level's duration."""

    from_rate: float = Field(ge=0, le=MAX_RATE)
    to_rate: float = Field(gt=0, le=MAX_RATE)


class LoadSpec(_Strict):
    concurrency: list[int] | None = None
    rate: list[float] | None = None  # requests/s, open loop
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0, le=1e6)  # gamma shape; 1.0 = Poisson
    ramp: RampSpec | None = None
    trace: str | None = None  # JSONL: {"t": seconds, "prompt_tokens": n, "output_tokens": m}
    saturation: SaturationSpec | None = None
    duration_s: float = Field(gt=0, le=MAX_DURATION_S)
    warmup_s: float = Field(default=0.0, ge=0)
    cooldown_s: float = Field(default=0.0, ge=0)
    think_time_s: float = Field(default=0.0, ge=0, le=MAX_DURATION_S)
    max_requests: int = Field(default=DEFAULT_MAX_REQUESTS, ge=1, le=1 << 40)
    max_concurrency: int = Field(default=4096, ge=1)  # cap on in-flight requests, open loop
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
        if self.warmup_s + self.cooldown_s >= self.duration_s:
            raise ValueError(
                f"warmup_s + cooldown_s ({self.warmup_s + self.cooldown_s}) must be shorter than "
                f"duration_s ({self.duration_s})"
            )
        return self


# ---------------------------------------------------------------- SLOs, regions, labels


class SLO(_Strict):
    metric: Literal["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfat_ms"]
    percentile: float = Field(gt=0, lt=100)
    threshold: float = Field(gt=0, le=1e12)


class Region(_Strict):
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


class ValiditySpec(_Strict):
    """Self-check bounds: past these, the generator, not the server, shaped the numbers."""

    # the bound on a token stamp's error: the loop's lag p99 with user-space stamps; with
    # kernel stamps, the lag that tokens read together must not exceed for over 1 % of reads
    max_loop_lag_p99_ms: float = Field(default=2.0, gt=0)
    max_dispatch_delay_p99_ms: float = Field(default=5.0, gt=0)
    max_cpu_percent: float = Field(default=90.0, gt=0)
    # a level whose achieved load (mean in flight, or sent req/s) falls short of the configured
    # load by more than this fraction did not deliver the load it claims to measure
    max_load_shortfall: float = Field(default=DEFAULT_MAX_LOAD_SHORTFALL, ge=0, lt=1)


class RunSpec(_Strict):
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
    cost: CostSpec = Field(default_factory=CostSpec)  # prices, dated; see loadgen.cost
    pacing: PacingSpec = Field(default_factory=PacingSpec)  # provider limits; loadgen.pacing

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

    def public_dict(self) -> dict[str, Any]:
        """The spec as stored and planned: keys are only env var names, and every header value
        or query parameter not declared public is replaced (loadgen.secrets)."""
        return redact_spec(self.model_dump(mode="json"))


_UNION_TAGS = frozenset(
    {"FixedLength", "UniformLength", "NormalLength", "LognormalLength"}
    | {"fixed", "uniform", "normal", "lognormal"}
)


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS:
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

    from loadgen.presets import apply_preset  # presets validate against this module's types

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
        raise SpecError("; ".join(lines), where=where) from None


def load_spec(path: str | Path) -> RunSpec:
    """Read and validate a TOML run spec; raise `SpecError` naming the file and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", where=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read: {exc}", where=str(p)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}", where=str(p)) from None
    spec = spec_from_dict(data, where=str(p))
    base = p.parent
    return _resolve_paths(spec, base)


def _resolve_paths(spec: RunSpec, base: Path) -> RunSpec:
    """Make dataset and trace paths relative to the spec's folder, and check they exist."""
    updates_w: dict[str, Any] = {}
    updates_l: dict[str, Any] = {}
    if spec.workload.dataset:
        p = (base / spec.workload.dataset).resolve()
        if not p.is_file():
            raise SpecError(f"dataset file not found: {p}", where="workload.dataset")
        updates_w["dataset"] = str(p)
    if spec.load.trace:
        p = (base / spec.load.trace).resolve()
        if not p.is_file():
            raise SpecError(f"trace file not found: {p}", where="load.trace")
        updates_l["trace"] = str(p)
    if not updates_w and not updates_l:
        return spec
    return spec.model_copy(
        update={
            "workload": spec.workload.model_copy(update=updates_w),
            "load": spec.load.model_copy(update=updates_l),
        }
    )
