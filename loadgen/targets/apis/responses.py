"""The OpenAI Responses API (`POST /responses`): `input` messages, `max_output_tokens`; SSE
events by `type` — `response.output_text.delta` (content), `response.reasoning_text.delta` and
`response.reasoning_summary_text.delta` (reasoning), `response.function_call_arguments.delta`
(tool calls), usage on `response.completed` (or `response.incomplete`), errors as `error` or
`response.failed`."""

from __future__ import annotations

from typing import Any

from loadgen.errors import InBandError, StreamProtocolError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, ServerTimings, StreamEvent, Usage
from loadgen.targets.apis.base import (
    OPENAI_FIELDS,
    JsonEventDecoder,
    SseApi,
    body_streaming,
    int_or_none,
    loads_object,
    output_cap,
    pass_through,
)
from loadgen.targets.openai_stream import short

_DELTAS = {
    "response.output_text.delta": EventKind.CONTENT,
    "response.refusal.delta": EventKind.CONTENT,
    "response.reasoning_text.delta": EventKind.REASONING,
    "response.reasoning_summary_text.delta": EventKind.REASONING,
    "response.function_call_arguments.delta": EventKind.TOOL_CALL,
}
_ENDS = ("response.completed", "response.incomplete")
_DROP = OPENAI_FIELDS


def parse_usage(u: Any) -> Usage | None:
    if not isinstance(u, dict):
        return None
    out_d = u.get("output_tokens_details")
    in_d = u.get("input_tokens_details")
    usage = Usage(
        prompt_tokens=int_or_none(u.get("input_tokens")),
        completion_tokens=int_or_none(u.get("output_tokens")),
        reasoning_tokens=int_or_none(out_d.get("reasoning_tokens"))
        if isinstance(out_d, dict)
        else None,
    )
    cached = int_or_none(in_d.get("cached_tokens")) if isinstance(in_d, dict) else None
    if cached is not None:
        usage.server = ServerTimings(cached_tokens=cached)
    return usage


def _error(obj: dict[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, dict):
        return short(str(err.get("message") or err.get("code") or err))
    if isinstance(obj.get("message"), str):
        return short(obj["message"])
    return short(str(err if err is not None else obj))


class ResponsesDecoder(JsonEventDecoder):
    """Ends at response.completed (or [DONE], which some compatible servers add after it)."""

    __slots__ = ()

    def event(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        kind = obj.get("type")
        ev_kind = _DELTAS.get(kind) if isinstance(kind, str) else None
        if ev_kind is not None:
            delta = obj.get("delta")
            if not isinstance(delta, str):
                raise StreamProtocolError(f"{kind} without a string delta", t_ns=t_ns)
            if delta:
                out.append(StreamEvent(ev_kind, t_ns, delta, 1))
        elif kind in _ENDS:
            resp = obj.get("response")
            self.end(t_ns, out, parse_usage(resp.get("usage")) if isinstance(resp, dict) else None)
        elif kind == "error" or kind == "response.failed":
            resp = obj.get("response")
            src = resp if kind == "response.failed" and isinstance(resp, dict) else obj
            raise InBandError(f"in-band error: {_error(src)}", t_ns=t_ns)


class OpenAIResponses(SseApi):
    name = "openai-responses"
    end_marker: bytes | None = b"response.completed"

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        return "/responses"

    def models_path(self, spec: TargetSpec) -> str:
        return "/models"

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        src, streaming = body_streaming(spec, request)
        body: dict[str, Any] = {"model": spec.model, "stream": streaming}
        if "input" not in src:
            msgs = src.get("messages")
            body["input"] = msgs if msgs is not None else src.get("prompt", "")
        cap = output_cap(src)
        if cap is not None:
            body["max_output_tokens"] = cap
        return pass_through(body, src, _DROP), streaming

    def decoder(self) -> ResponsesDecoder:
        return ResponsesDecoder()

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        obj = loads_object(body, t_ns)
        if obj.get("error"):
            raise InBandError(f"error body: {_error(obj)}", t_ns=t_ns)
        out: list[StreamEvent] = []
        for item in obj.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "reasoning":
                parts = (item.get("content") or []) + (item.get("summary") or [])
                text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
                if text:
                    out.append(StreamEvent(EventKind.REASONING, t_ns, text, 1))
            elif item.get("type") == "message":
                text = "".join(
                    str(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict)
                )
                if text:
                    out.append(StreamEvent(EventKind.CONTENT, t_ns, text, 1))
            elif item.get("type") == "function_call":
                text = f"{item.get('name', '')}{item.get('arguments', '')}"
                out.append(StreamEvent(EventKind.TOOL_CALL, t_ns, text, 1))
        usage = parse_usage(obj.get("usage"))
        if usage is not None:
            out.append(StreamEvent(EventKind.USAGE, t_ns, usage=usage))
        out.append(StreamEvent(EventKind.DONE, t_ns))
        return out
