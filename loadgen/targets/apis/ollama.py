"""Ollama's native `/api/chat` and `/api/generate`: NDJSON, one object per line with
`message.content` (chat) or `response` (generate) and `thinking`; the last line (`done: true`)
carries `prompt_eval_count`, `eval_count` and the server's durations (ns), which become the
USAGE event's `ServerTimings`. Sampling options go under `options` (`num_predict` = max_tokens)."""

from __future__ import annotations

from typing import Any

from loadgen.errors import InBandError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, ServerTimings, StreamEvent, Usage
from loadgen.targets.apis.base import (
    OPENAI_FIELDS,
    JsonEventDecoder,
    body_streaming,
    int_or_none,
    output_cap,
    pass_through,
    prompt_text,
)
from loadgen.targets.openai_stream import short

# OpenAI-style body fields that Ollama takes under `options`
_OPTIONS = ("seed", "stop", "temperature", "top_p", "top_k", "presence_penalty",
            "frequency_penalty", "repeat_penalty", "min_p")  # fmt: skip
_DROP = (*OPENAI_FIELDS, "response_format", *_OPTIONS, "options")


def _ms(v: Any) -> float | None:
    return v / 1e6 if type(v) in (int, float) else None


def final_usage(obj: dict[str, Any]) -> Usage:
    """The `done: true` object's counts and durations."""
    prompt = int_or_none(obj.get("prompt_eval_count"))
    decode = int_or_none(obj.get("eval_count"))
    timings = ServerTimings(
        prompt_tokens=prompt,
        prefill_ms=_ms(obj.get("prompt_eval_duration")),
        decode_tokens=decode,
        decode_ms=_ms(obj.get("eval_duration")),
    )
    return Usage(prompt_tokens=prompt, completion_tokens=decode, server=timings)


class OllamaDecoder(JsonEventDecoder):
    """NDJSON lines, ending at `done: true` (with the server's durations); no [DONE]."""

    __slots__ = ("chat",)
    done_marker = False

    def __init__(self, chat: bool) -> None:
        super().__init__()
        self.chat = chat

    def event(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        if "error" in obj:
            raise InBandError(f"in-band error: {short(str(obj['error']))}", t_ns=t_ns)
        _deltas(obj, self.chat, t_ns, out)
        if obj.get("done") is True:
            self.end(t_ns, out, final_usage(obj))


def _deltas(obj: dict[str, Any], chat: bool, t_ns: int, out: list[StreamEvent]) -> None:
    src = obj.get("message") if chat else obj
    if not isinstance(src, dict):
        return
    thinking = src.get("thinking")
    if isinstance(thinking, str) and thinking:
        out.append(StreamEvent(EventKind.REASONING, t_ns, thinking, 1))
    text = src.get("content") if chat else src.get("response")
    if isinstance(text, str) and text:
        out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
    calls = src.get("tool_calls") if chat else None
    if calls:
        out.append(StreamEvent(EventKind.TOOL_CALL, t_ns, short(str(calls), 10_000), 1))


class OllamaApi:
    framing = "ndjson"
    content_type = "application/json"
    stream_types: tuple[str, ...] = ("application/x-ndjson", "application/json")
    end_marker: bytes | None = b'"done":true'

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.name = "ollama-chat" if chat else "ollama-generate"

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return "/api/chat" if self.chat else "/api/generate"

    def models_path(self, spec: TargetSpec) -> str:
        return "/api/tags"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src, streaming = body_streaming(spec, request)
        body: dict[str, Any] = {"model": spec.model, "stream": streaming}
        if self.chat:
            body["messages"] = src.get("messages") or [
                {"role": "user", "content": prompt_text(src)}
            ]
        else:
            body["prompt"] = prompt_text(src)
        options: dict[str, Any] = dict(src.get("options") or {})
        cap = output_cap(src)
        if cap is not None:
            options.setdefault("num_predict", cap)
        for k in _OPTIONS:
            if k in src:
                options.setdefault(k, src[k])
        if options:
            body["options"] = options
        fmt = src.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            schema = fmt.get("json_schema")
            body["format"] = schema.get("schema", schema) if isinstance(schema, dict) else "json"
        elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
            body["format"] = "json"
        return pass_through(body, src, _DROP), streaming

    def decoder(self) -> OllamaDecoder:
        return OllamaDecoder(self.chat)

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        dec = OllamaDecoder(self.chat)
        dec.decode(body.strip(), t_ns, out)
        if not dec.done:
            out.append(StreamEvent(EventKind.DONE, t_ns))
        return out

    def head_timings(self, headers: dict[str, str]) -> ServerTimings | None:
        return None
