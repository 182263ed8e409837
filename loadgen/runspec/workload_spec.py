"""The `[workload]` table: what each request asks (lengths, a dataset, a shared prefix,
multi-turn sessions, structured output)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from loadgen.runspec.adapter_spec import MAX_ADAPTERS, AdapterField, AdapterSpec
from loadgen.runspec.fields import MAX_SEED, Strict
from loadgen.runspec.lengths import FixedLength, LengthDist, coerce_length


class OutputSpec(Strict):
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


DEFAULT_SPEAK_SECONDS = (5.0,)  # speech in, neither files nor speak_seconds given: one clip


class AudioSpec(Strict):
    """`[workload.audio]`: what a speech run asks for. Speech out (`api = "openai-speech"`): the
    workload's text (its prompt lengths, in words, or its dataset) spoken in `voice` as
    `format`, streamed as raw audio (`stream_format = "audio"`) or SSE (`"sse"`). Speech in
    (`api = "openai-transcription"`): the audio files of the folder `files` (one per request, in
    name order, cycled), or clips spoken offline by espeak-ng at about `speak_seconds` each
    (their exact lengths read from the WAV made); `language` and `response_format` are sent."""

    voice: str = Field(default="alloy", min_length=1, max_length=200)
    format: Literal["pcm", "wav", "mp3", "opus", "aac", "flac"] = "pcm"
    stream_format: Literal["audio", "sse"] = "audio"
    files: str | None = None
    speak_seconds: list[float] | None = Field(default=None, min_length=1, max_length=1000)
    speak_wpm: int = Field(default=175, ge=80, le=450)  # espeak-ng's words per minute
    language: str | None = Field(default=None, pattern=r"^[a-z]{2,3}(-[A-Za-z]{2,4})?$")
    response_format: Literal["json", "verbose_json"] = "json"

    @field_validator("speak_seconds")
    @classmethod
    def _seconds(cls, v: list[float] | None) -> list[float] | None:
        for s in v or []:
            if not 0.5 <= s <= 600:
                raise ValueError(f"each clip must be 0.5 to 600 seconds (got {s:g})")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> AudioSpec:
        if self.files is not None and self.speak_seconds is not None:
            raise ValueError("give either files or speak_seconds, not both")
        return self


class WorkloadSpec(Strict):
    prompt_tokens: LengthDist = Field(default_factory=lambda: FixedLength(value=128))
    output_tokens: LengthDist = Field(default_factory=lambda: FixedLength(value=128))
    shared_prefix_fraction: float = Field(default=0.0, ge=0, le=1)
    dataset: str | None = None  # JSONL with "prompt" (and optional "output_tokens") per line
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    system_prompt: str | None = None
    sessions: SessionSpec | None = None
    output: OutputSpec | None = None  # structured output (JSON schema or a tool call)
    audio: AudioSpec | None = None  # speech out / speech in (the target's api says which)
    # multi-LoRA (loadgen/runspec/adapter_spec.py): each request's adapter by a seeded weighted
    # draw, per request or (switch_every = N) per run of N consecutive requests of a shard
    adapters: list[AdapterSpec] = Field(default_factory=list, max_length=MAX_ADAPTERS)
    adapter_field: AdapterField = "model"
    switch_every: int = Field(default=0, ge=0, le=1_000_000_000)
    # prefix caches: each request draws (seeded, half each) whether it carries the shared prefix,
    # so TTFT with and without it is measured side by side under the same load
    compare_prefix: bool = False

    _coerce_prompt = field_validator("prompt_tokens", "output_tokens", mode="before")(coerce_length)

    @model_validator(mode="after")
    def _adapters(self) -> WorkloadSpec:
        names = [a.name for a in self.adapters]
        if len(set(names)) != len(names):
            raise ValueError("adapters: each name may appear once")
        if self.switch_every and not self.adapters:
            raise ValueError("switch_every needs [[workload.adapters]]")
        if self.adapter_field == "model" and any(a.lora_id is not None for a in self.adapters):
            raise ValueError('adapters: lora_id is for adapter_field = "lora"')
        if self.compare_prefix and not self.shared_prefix_fraction:
            raise ValueError("compare_prefix needs shared_prefix_fraction > 0")
        if self.compare_prefix and self.dataset:
            raise ValueError("compare_prefix is for synthetic prompts, not a dataset")
        return self


class SessionSpec(Strict):
    """Multi-turn chat: each session sends `turns` requests whose context grows."""

    turns: int = Field(ge=1, le=1000)
    user_tokens_per_turn: LengthDist = Field(default_factory=lambda: FixedLength(value=64))

    _coerce = field_validator("user_tokens_per_turn", mode="before")(coerce_length)


WorkloadSpec.model_rebuild()
