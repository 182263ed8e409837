"""llama.cpp's native `/completion`: `prompt` and `n_predict`; SSE of `{"content", "stop"}`
objects, the last (`stop: true`) with `tokens_evaluated`, `tokens_predicted` and `timings`
(the server's prompt and generation times, as on its OpenAI endpoints)."""

from __future__ import annotations

from typing import Any

from loadgen.errors import InBandError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, StreamEvent, Usage
from loadgen.targets.apis.base import (
    OPENAI_FIELDS,
    JsonEventDecoder,
    SseApi,
    body_streaming,
    int_or_none,
    loads_object,
    output_cap,
    pass_through,
    prompt_text,
)
from loadgen.targets.openai_stream import _error_message, parse_llamacpp_timings

_DROP = (*OPENAI_FIELDS, "model", "stream")


def _final(obj: dict[str, Any]) -> Usage:
    return Usage(
        prompt_tokens=int_or_none(obj.get("tokens_evaluated")),
        completion_tokens=int_or_none(obj.get("tokens_predicted")),
        server=parse_llamacpp_timings(obj.get("timings")),
    )


class LlamaCppDecoder(JsonEventDecoder):
    """Ends at `stop: true` (with the server's usage and timings)."""

    __slots__ = ()

    def event(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        if "error" in obj:
            raise InBandError(f"in-band error: {_error_message(obj['error'])}", t_ns=t_ns)
        text = obj.get("content")
        if isinstance(text, str) and text:
            out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
        if obj.get("stop") is True:
            self.end(t_ns, out, _final(obj))


class LlamaCppCompletion(SseApi):
    name = "llamacpp-completion"
    end_marker: bytes | None = b'"stop":true'

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return "/completion"

    def models_path(self, spec: TargetSpec) -> str:
        return "/health"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src, streaming = body_streaming(spec, request)
        body: dict[str, Any] = {"prompt": prompt_text(src), "stream": streaming}
        cap = output_cap(src)
        if cap is not None:
            body["n_predict"] = cap
        return pass_through(body, src, _DROP), streaming

    def decoder(self) -> LlamaCppDecoder:
        return LlamaCppDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        obj = loads_object(body, t_ns)
        if "error" in obj:
            raise InBandError(f"error body: {_error_message(obj['error'])}", t_ns=t_ns)
        out: list[StreamEvent] = []
        text = obj.get("content")
        if isinstance(text, str) and text:
            out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
        out.append(StreamEvent(EventKind.USAGE, t_ns, usage=_final(obj)))
        out.append(StreamEvent(EventKind.DONE, t_ns))
        return out
