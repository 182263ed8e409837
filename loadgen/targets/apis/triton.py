"""Triton/KServe's generate extension: `POST /v2/models/{model}/generate_stream` with
`text_input`, `max_tokens` and `stream: true` (the TensorRT-LLM and vLLM backends' input names);
SSE of `{"text_output": ...}` deltas. The stream has no end event of its own: a body that ends
cleanly is the end (DONE). No usage: output tokens are the deltas counted."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from loadgen.errors import InBandError
from loadgen.spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, ServerTimings, StreamEvent
from loadgen.targets.apis.base import dumps, loads_object, output_cap, prompt_text
from loadgen.targets.openai_stream import short

_DROP = ("max_tokens", "max_completion_tokens", "stream_options", "messages", "prompt", "model")


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


class TritonGenerate:
    name = "triton-generate"
    framing = "sse"
    stream_types: tuple[str, ...] = ("text/event-stream",)
    end_marker: bytes | None = None

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        verb = "generate_stream" if streaming else "generate"
        return f"/v2/models/{quote(spec.model, safe='')}/{verb}"

    def models_path(self, spec: TargetSpec) -> str:
        return f"/v2/models/{quote(spec.model, safe='')}/ready"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src = request.body
        streaming = bool(src.get("stream", spec.stream))
        body: dict[str, Any] = {"text_input": src.get("text_input") or prompt_text(src)}
        cap = output_cap(src)
        if cap is not None:
            body["max_tokens"] = cap
        body["stream"] = streaming
        body.update((k, v) for k, v in src.items() if k not in _DROP and k != "stream")
        return dumps(body), streaming

    def decoder(self) -> TritonDecoder:
        return TritonDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        TritonDecoder().decode(body, t_ns, out)
        out.append(StreamEvent(EventKind.DONE, t_ns))
        return out

    def head_timings(self, headers: dict[str, str]) -> ServerTimings | None:
        return None
