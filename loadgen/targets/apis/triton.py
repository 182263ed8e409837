"""Triton/KServe's generate extension: `POST /v2/models/{model}/generate_stream` with
`text_input`, `max_tokens` and `stream: true` (the TensorRT-LLM and vLLM backends' input names);
SSE of `{"text_output": ...}` deltas. The stream has no end event of its own: a body that ends
cleanly is the end (DONE). No usage: output tokens are the deltas counted."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from loadgen.errors import InBandError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, StreamEvent
from loadgen.targets.apis.base import (
    OPENAI_FIELDS,
    SseApi,
    body_streaming,
    loads_object,
    output_cap,
    pass_through,
    prompt_text,
)
from loadgen.targets.openai_stream import short

_DROP = (*OPENAI_FIELDS, "model", "stream")


class TritonDecoder:
    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def decode(self, payload: bytes, t_ns: int, out: list[StreamEvent]) -> None:
        obj = loads_object(payload, t_ns)
        if "error" in obj:
            raise InBandError(f"in-band error: {short(str(obj['error']))}", t_ns=t_ns)
        text = obj.get("text_output")
        if isinstance(text, str) and text:
            out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))

    def finish(self, t_ns: int, out: list[StreamEvent]) -> None:
        self.done = True
        out.append(StreamEvent(EventKind.DONE, t_ns))


class TritonGenerate(SseApi):
    name = "triton-generate"
    end_marker: bytes | None = None

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        verb = "generate_stream" if streaming else "generate"
        return f"/v2/models/{quote(spec.model, safe='')}/{verb}"

    def models_path(self, spec: TargetSpec) -> str:
        return f"/v2/models/{quote(spec.model, safe='')}/ready"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src, streaming = body_streaming(spec, request)
        body: dict[str, Any] = {"text_input": src.get("text_input") or prompt_text(src)}
        cap = output_cap(src)
        if cap is not None:
            body["max_tokens"] = cap
        body["stream"] = streaming
        return pass_through(body, src, _DROP), streaming

    def decoder(self) -> TritonDecoder:
        return TritonDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        TritonDecoder().decode(body, t_ns, out)
        out.append(StreamEvent(EventKind.DONE, t_ns))
        return out
