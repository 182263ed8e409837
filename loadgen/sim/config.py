"""Configuration of the simulated engine: the engine model, output shaping, faults, and the named
presets; `load_config` layers preset -> JSON file -> command-line overrides and validates once.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadgen.errors import SpecError


class FaultKind(StrEnum):
    """What can go wrong (or be odd) with one request. `arg` meaning and default per kind:

    http_429 Retry-After s (1) | http_503 Retry-After s (none) | error_event after N tokens (3) |
    reset after N tokens (3) | trickle s between bytes (4) | no_done | multi_token k per event (3) |
    utf8_split | coalesce n events per write (4) | reasoning first R tokens (8) | tool_calls |
    html_error HTTP status (200) | non_streaming
    """

    HTTP_429 = "http_429"
    HTTP_503 = "http_503"
    ERROR_EVENT = "error_event"
    RESET = "reset"
    TRICKLE = "trickle"
    NO_DONE = "no_done"
    MULTI_TOKEN = "multi_token"  # noqa: S105 - not a password
    UTF8_SPLIT = "utf8_split"
    COALESCE = "coalesce"
    REASONING = "reasoning"
    TOOL_CALLS = "tool_calls"
    HTML_ERROR = "html_error"
    NON_STREAMING = "non_streaming"


FAULT_DEFAULT_ARG: dict[FaultKind, float | None] = {
    FaultKind.HTTP_429: 1.0,
    FaultKind.HTTP_503: None,
    FaultKind.ERROR_EVENT: 3,
    FaultKind.RESET: 3,
    FaultKind.TRICKLE: 4.0,
    FaultKind.NO_DONE: None,
    FaultKind.MULTI_TOKEN: 3,
    FaultKind.UTF8_SPLIT: None,
    FaultKind.COALESCE: 4,
    FaultKind.REASONING: 8,
    FaultKind.TOOL_CALLS: None,
    FaultKind.HTML_ERROR: 200,
    FaultKind.NON_STREAMING: None,
}

FAULT_ALIASES = {"429": FaultKind.HTTP_429, "503": FaultKind.HTTP_503}


def parse_fault_kind(text: str, where: str) -> FaultKind:
    name = text.strip().lower().replace("-", "_")
    if name in FAULT_ALIASES:
        return FAULT_ALIASES[name]
    try:
        return FaultKind(name)
    except ValueError:
        known = ", ".join(k.value for k in FaultKind)
        raise SpecError(f"unknown fault kind {text!r} (known: {known}, 429, 503)", where) from None


class FaultRule(BaseModel):
    """Apply fault `kind` (with `arg`, or the kind's default) to a fraction `rate` of requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: FaultKind
    rate: float = Field(ge=0.0, le=1.0)
    arg: float | None = None

    @property
    def effective_arg(self) -> float | None:
        return FAULT_DEFAULT_ARG[self.kind] if self.arg is None else self.arg


def parse_fault_rule(text: str, where: str = "--fault") -> FaultRule:
    """`KIND[:ARG]=RATE`, e.g. `429=0.05`, `reset:5=0.01`, `trickle:4=0.001`."""
    head, sep, rate_text = text.partition("=")
    if not sep:
        raise SpecError(f"expected KIND[:ARG]=RATE, got {text!r}", where)
    kind_text, _, arg_text = head.partition(":")
    kind = parse_fault_kind(kind_text, where)
    try:
        rate = float(rate_text)
        arg = float(arg_text) if arg_text else None
    except ValueError:
        raise SpecError(f"rate and arg must be numbers in {text!r}", where) from None
    try:
        return FaultRule(kind=kind, rate=rate, arg=arg)
    except ValidationError as e:
        raise SpecError(f"{text!r}: {_first_error(e)}", where) from None


class SimConfig(BaseModel):
    """Everything the simulated engine does. Times are ms, rates per second (monotonic clock).

    mode "fixed": every stream's first token is due `ttft_ms` after its request arrived and each
    next token `itl_ms` later, whatever the load. mode "batching": continuous batching with at
    most `slots` sequences; one engine step lasts decode_step_ms + decode_step_ms_per_seq * batch
    plus the prefill of the prompts admitted in it (prompt tokens / prefill_tokens_per_s); every
    sequence in the step gets one token at its end. A request reserves prompt + max_tokens of the
    `kv_capacity_tokens` on admission and waits while that does not fit.
    """

    model_config = ConfigDict(extra="forbid")
    mode: Literal["fixed", "batching"] = "fixed"
    ttft_ms: float = Field(default=50.0, ge=0.0)
    itl_ms: float = Field(default=10.0, ge=0.0)
    slots: int = Field(default=16, ge=1)
    prefill_tokens_per_s: float = Field(default=20_000.0, gt=0.0)
    decode_step_ms: float = Field(default=15.0, gt=0.0)
    decode_step_ms_per_seq: float = Field(default=0.5, ge=0.0)
    kv_capacity_tokens: int = Field(default=1_000_000, ge=1)
    rate_limit_rps: float = Field(default=0.0, ge=0.0)  # 0 = no budget
    rate_limit_burst: float = Field(default=0.0, ge=0.0)  # 0 = one second's worth
    # tokens (prompt + max_tokens, charged on arrival, as providers count) per second; 0 = none
    rate_limit_tokens_per_s: float = Field(default=0.0, ge=0.0)
    rate_limit_token_burst: float = Field(default=0.0, ge=0.0)  # 0 = one second's worth
    # advertise the budgets as providers do: x-ratelimit-{limit,remaining,reset}-{requests,
    # tokens} on every completion answer (limit per minute, remaining now, reset = until full)
    rate_limit_headers: bool = False
    default_max_tokens: int = Field(default=128, ge=1)
    max_tokens_limit: int = Field(default=1_000_000, ge=1)
    model: str = Field(default="peakload-sim", min_length=1)
    tokens_per_chunk: int = Field(default=1, ge=1)
    events_per_write: int = Field(default=1, ge=1)
    reasoning_tokens: int = Field(default=0, ge=0)
    reasoning_field: Literal["reasoning_content", "reasoning"] = "reasoning_content"
    # connections, as real servers treat them: "never" closes only when asked; "response"
    # answers `Connection: close` and closes after every response; "response_silent" closes
    # after every response without saying so; "stream" closes right after a streamed response
    # (llama.cpp's server does, while advertising keep-alive)
    close_after: Literal["never", "response", "response_silent", "stream"] = "never"
    # sent as `Keep-Alive:` on kept connections, e.g. "timeout=5, max=100"
    keepalive_header: str = Field(default="", pattern=r"^[\x20-\x7e]*$")
    # a misbehaving gateway: every error answer (JSON, HTML page, SSE error event) quotes the
    # request's method, target (path and query) and headers, as some proxies' error pages do
    echo_request: bool = False
    idle_close_s: float = Field(default=0.0, ge=0.0)  # close connections idle this long (0: never)
    report_timings: bool = False  # llama.cpp's `timings` object closing each stream
    # how the OpenAI routes report them: llama.cpp's `timings` (prompt evaluation after the
    # slot wait, no queue time) or Groq's `x_groq.usage` (queue, prompt and completion times)
    timings_as: Literal["llamacpp", "groq"] = "llamacpp"
    # per request parameter: "reject" (400), "ignore" or "honour" (loadgen.sim.params)
    params: dict[str, Literal["reject", "ignore", "honour"]] = Field(default_factory=dict)
    # which wire API the completion routes speak ("all": every one, each at its own path)
    protocol: Literal["all", "openai", "openai-responses", "ollama", "tgi-generate",
                      "llamacpp-completion", "triton-generate"] = "all"  # fmt: skip
    # the audio APIs (loadgen.sim.audio): audio per speech chunk, the voice's pace, and the
    # real-time factor (0: tokens come at itl_ms like text; else each is due audio_rtf times
    # the audio it carries after the one before, in mode "fixed")
    audio_chunk_ms: float = Field(default=100.0, ge=5.0, le=10_000.0)
    speech_words_per_s: float = Field(default=2.5, gt=0.0, le=20.0)
    audio_rtf: float = Field(default=0.0, ge=0.0, le=100.0)
    stall_every_s: float = Field(default=0.0, ge=0.0)
    stall_for_s: float = Field(default=0.0, ge=0.0)
    faults: list[FaultRule] = Field(default_factory=list)
    # what a request's fault is drawn from: its request id (the same request id gets the same
    # fault on every run), or its arrival number (the Nth request to arrive gets the same fault
    # on every run, so a run of N requests has the same fault counts whatever ids it sends)
    fault_draw: Literal["request", "arrival"] = "request"
    seed: int = 0
    timer_spin_us: float = Field(default=1000.0, ge=0.0)  # see engine.Scheduler
    truth_flush_ms: float = Field(default=25.0, gt=0.0)  # small, frequent slices of work

    @model_validator(mode="after")
    def _check(self) -> SimConfig:
        total = sum(f.rate for f in self.faults)
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {total:g}; one fault per request, so <= 1")
        kinds = [f.kind for f in self.faults]
        if len(set(kinds)) != len(kinds):
            raise ValueError("each fault kind may appear once in faults")
        if (self.stall_every_s > 0) != (self.stall_for_s > 0):
            raise ValueError("stall_every_s and stall_for_s must be set together")
        if self.stall_every_s > 0 and self.stall_for_s >= self.stall_every_s:
            raise ValueError("stall_for_s must be shorter than stall_every_s")
        if self.default_max_tokens > self.max_tokens_limit:
            raise ValueError("default_max_tokens exceeds max_tokens_limit")
        return self

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SimConfig:
        """A named preset (see PRESETS) with fields replaced, e.g. preset("fixed", itl_ms=20)."""
        return load_config(name, None, overrides)


PRESETS: dict[str, dict[str, Any]] = {
    # Exact schedule for accuracy benchmarks: no batching effect at any load.
    "fixed": {"mode": "fixed", "ttft_ms": 50.0, "itl_ms": 10.0},
    # A small GPU serving a ~8B model: knee at 16 streams, ~32k tokens of KV.
    "small-gpu": {
        "mode": "batching",
        "slots": 16,
        "prefill_tokens_per_s": 4_000.0,
        "decode_step_ms": 20.0,
        "decode_step_ms_per_seq": 1.5,
        "kv_capacity_tokens": 32_768,
    },
    # A large GPU: 128 slots, fast prefill, half a million tokens of KV.
    "large-gpu": {
        "mode": "batching",
        "slots": 128,
        "prefill_tokens_per_s": 40_000.0,
        "decode_step_ms": 12.0,
        "decode_step_ms_per_seq": 0.25,
        "kv_capacity_tokens": 500_000,
    },
    # llama.cpp's llama-server as seen here: 4 slots, about 36 tok/s per stream at 4 streams,
    # keep-alive advertised but the connection closed after each stream, idle ones after 5 s,
    # its own timings in the last chunk.
    "llamacpp": {
        "mode": "batching",
        "slots": 4,
        "prefill_tokens_per_s": 200.0,
        "decode_step_ms": 24.0,
        "decode_step_ms_per_seq": 1.0,
        "kv_capacity_tokens": 8192,
        "close_after": "stream",
        "keepalive_header": "timeout=5, max=100",
        "idle_close_s": 5.0,
        "report_timings": True,
    },
    # A hosted API: large engine behind a requests-per-second budget (429 + Retry-After),
    # advertised in x-ratelimit-* headers.
    "hosted": {
        "mode": "batching",
        "slots": 64,
        "prefill_tokens_per_s": 20_000.0,
        "decode_step_ms": 10.0,
        "decode_step_ms_per_seq": 0.3,
        "kv_capacity_tokens": 400_000,
        "rate_limit_rps": 20.0,
        "rate_limit_burst": 20.0,
        "rate_limit_headers": True,
    },
}


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else str(err["msg"])


def load_config(
    preset: str | None = None,
    config_file: Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> SimConfig:
    """Preset (default "fixed", or the file's "preset" key) <- JSON file <- overrides.

    Raises `SpecError` naming the file/option and field on any bad input.
    """
    data: dict[str, Any] = {}
    where = "sim config"
    file_preset: str | None = None
    if config_file is not None:
        where = str(config_file)
        try:
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
        except OSError as e:
            raise SpecError(f"cannot read: {e.strerror}", where) from None
        except json.JSONDecodeError as e:
            msg = f"not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
            raise SpecError(msg, where) from None
        if not isinstance(loaded, dict):
            raise SpecError("top level must be a JSON object", where)
        file_preset = loaded.pop("preset", None)
        faults = loaded.get("faults")
        if isinstance(faults, dict):  # {"reset": 0.01} or {"reset": {"rate": 0.01, "arg": 5}}
            loaded["faults"] = [_fault_entry(k, v, where) for k, v in faults.items()]
        data = loaded
    name = preset or file_preset or "fixed"
    if name not in PRESETS:
        raise SpecError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})", where)
    merged = {**PRESETS[name], **data}
    for key, value in (overrides or {}).items():
        if key == "faults":
            merged["faults"] = [*merged.get("faults", []), *value]
        elif value is not None:
            merged[key] = value
    try:
        return SimConfig.model_validate(merged)
    except ValidationError as e:
        raise SpecError(_first_error(e), where) from None


def _fault_entry(kind: str, value: Any, where: str) -> dict[str, Any]:
    fk = parse_fault_kind(kind, f"{where}: faults")
    if isinstance(value, dict):
        return {"kind": fk, **value}
    return {"kind": fk, "rate": value}
