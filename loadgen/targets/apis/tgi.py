"""Hugging Face TGI's native `/generate_stream` (SSE of token objects; the last one carries
`generated_text` and, with `details: true`, `details.generated_tokens`) and `/generate` (one
JSON object). Its `x-queue-time`, `x-inference-time`, `x-time-per-token` (ms) and
`x-prompt-tokens` / `x-generated-tokens` headers are the server's own timings."""

from __future__ import annotations

from typing import Any

from loadgen.errors import InBandError, StreamProtocolError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, ServerTimings, StreamEvent, Usage
from loadgen.targets.apis.base import (
    JsonEventDecoder,
    SseApi,
    body_streaming,
    dumps,
    int_or_none,
    loads_object,
    output_cap,
    prompt_text,
)
from loadgen.targets.openai_stream import short

_PARAMS = ("seed", "stop", "temperature", "top_p", "top_k", "repetition_penalty",
           "do_sample", "grammar", "watermark", "best_of", "decoder_input_details",
           "top_n_tokens", "truncate", "typical_p")  # fmt: skip


def _details_usage(details: Any) -> Usage | None:
    if not isinstance(details, dict):
        return None
    return Usage(
        prompt_tokens=int_or_none(details.get("input_length")),
        completion_tokens=int_or_none(details.get("generated_tokens")),
    )


def _error(obj: dict[str, Any], t_ns: int) -> InBandError:
    kind = obj.get("error_type")
    msg = short(str(obj.get("error")))
    return InBandError(f"in-band error{f' ({kind})' if kind else ''}: {msg}", t_ns=t_ns)


class TGIDecoder(JsonEventDecoder):
    """Ends at the event with `generated_text` (TGI sends no [DONE])."""

    __slots__ = ()
    done_marker = False

    def event(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        if "error" in obj:
            raise _error(obj, t_ns)
        token = obj.get("token")
        if not isinstance(token, dict):
            raise StreamProtocolError("generate_stream event without a token", t_ns=t_ns)
        text = token.get("text")
        if isinstance(text, str) and text and not token.get("special"):
            out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
        if obj.get("generated_text") is not None:  # the last event
            self.end(t_ns, out, _details_usage(obj.get("details")))


class TGIGenerate(SseApi):
    name = "tgi-generate"
    end_marker: bytes | None = b'"generated_text":"'

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return "/generate_stream" if streaming else "/generate"

    def models_path(self, spec: TargetSpec) -> str:
        return "/info"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src, streaming = body_streaming(spec, request)
        params: dict[str, Any] = dict(src.get("parameters") or {})
        cap = output_cap(src)
        if cap is not None:
            params.setdefault("max_new_tokens", cap)
        params.setdefault("details", True)
        for k in _PARAMS:
            if k in src:
                params.setdefault(k, src[k])
        fmt = src.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            schema = fmt.get("json_schema")
            value = schema.get("schema", schema) if isinstance(schema, dict) else {}
            params.setdefault("grammar", {"type": "json", "value": value})
        body: dict[str, Any] = {"inputs": src.get("inputs") or prompt_text(src)}
        body["parameters"] = params
        if streaming:
            body["stream"] = True
        return dumps(body), streaming

    def decoder(self) -> TGIDecoder:
        return TGIDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        obj = loads_object(body, t_ns)
        if "error" in obj:
            raise _error(obj, t_ns)
        out: list[StreamEvent] = []
        text = obj.get("generated_text")
        if isinstance(text, str) and text:
            out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
        usage = _details_usage(obj.get("details"))
        if usage is not None:
            out.append(StreamEvent(EventKind.USAGE, t_ns, usage=usage))
        out.append(StreamEvent(EventKind.DONE, t_ns))
        return out

    def head_timings(self, headers: dict[str, str]) -> ServerTimings | None:
        if "x-queue-time" not in headers and "x-inference-time" not in headers:
            return None
        return ServerTimings(
            prompt_tokens=_int(headers.get("x-prompt-tokens")),
            decode_tokens=_int(headers.get("x-generated-tokens")),
            decode_ms=_float(headers.get("x-inference-time")),
            queue_ms=_float(headers.get("x-queue-time")),
        )


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None
