"""The `[target]` table: which endpoint, which API, how to authenticate by reference, and the
client's timeouts."""

from __future__ import annotations

import re
from typing import Any, Literal, get_args
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator, model_validator

from loadgen.runspec.fields import MAX_TIMEOUT_S, Strict
from loadgen.runspec.spec_bounds import deadline_error

SPEECH_API = "openai-speech"  # audio out: the workload's text is spoken
TRANSCRIPTION_API = "openai-transcription"  # audio in: the workload's audio is transcribed
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_DEADLINE_S = 300.0
DEFAULT_IDLE_TIMEOUT_S = 60.0
MAX_DEADLINE_S = 1800.0  # chunk offsets are stored as int32 µs: 35 minutes at most
# every wire API a spec (and a preset) may name: OpenAI's, or an engine's native one
Api = Literal[
    "openai-chat",
    "openai-completions",
    "openai-responses",
    "ollama-chat",
    "ollama-generate",
    "tgi-generate",
    "llamacpp-completion",
    "triton-generate",
    "openai-speech",  # text to speech (audio out): loadgen.targets.apis.speech
    "openai-transcription",  # speech to text (audio in): loadgen.targets.apis.transcription
]
APIS: tuple[str, ...] = get_args(Api)
# An HTTP header name is an RFC 9110 token: "authorization " (a stray space) is not one.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_PARAM = re.compile(r"key|token|secret|passw|auth|sig|credential", re.IGNORECASE)


class TargetSpec(Strict):
    # a name from `loadgen/presets/`: its target defaults fill what this table leaves out
    preset: str | None = None
    # the wire API (loadgen.targets.apis): OpenAI's, or an engine's native one
    api: Api
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
    # loadgen.runspec.secrets). `headers_env` gives a header's value by reference (header ->
    # variable).
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
    # a request whose reused keep-alive connection died before any response byte is sent again:
    # true always, false never, unset only when it cannot have reached the server's
    # application (none of it acknowledged by the server's TCP: loadgen.targets.resend)
    resend_on_stale: bool | None = None
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

    @field_validator("deadline_s")
    @classmethod
    def _deadline_floor(cls, v: float) -> float:
        if (problem := deadline_error(v)) is not None:
            raise ValueError(problem)
        return v

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
