"""OpenAI `/chat/completions` and `/completions`: the workload's body plus `model`, `stream`
and `stream_options.include_usage` (each only if absent), the output cap under the name the
spec's preset uses; SSE decoded by `openai_stream` (every choice of `n > 1`)."""

from __future__ import annotations

from typing import Any

from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import PreparedRequest, StreamEvent
from loadgen.targets.apis.base import SseApi, dumps
from loadgen.targets.openai_stream import OpenAIStreamDecoder, decode_body


class OpenAIChat(SseApi):
    name = "openai-chat"
    end_marker: bytes | None = b"[DONE]"
    _path = "/chat/completions"

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return self._path

    def models_path(self, spec: TargetSpec) -> str:
        return "/models"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        body: dict[str, Any] = request.body
        streaming = bool(body.get("stream", spec.stream))
        add_opts = streaming and spec.include_usage and "stream_options" not in body
        rename = (
            spec.max_tokens_field == "max_completion_tokens"
            and self._path == "/chat/completions"
            and "max_tokens" in body
            and "max_completion_tokens" not in body
        )
        if "model" not in body or "stream" not in body or add_opts or rename:
            body = {"model": spec.model, "stream": streaming, **body}
            if add_opts:
                body["stream_options"] = {"include_usage": True}
            if rename:
                body["max_completion_tokens"] = body.pop("max_tokens")
        return dumps(body), streaming

    def decoder(self) -> OpenAIStreamDecoder:
        return OpenAIStreamDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        return decode_body(body, t_ns)


class OpenAICompletions(OpenAIChat):
    name = "openai-completions"
    _path = "/completions"
