"""What every wire API provides to the target (`Api`, `Decoder`), and what they share: the SSE
APIs' common part (`SseApi`), the body's streaming choice and pass-through, the prompt text of a
chat body, the output cap's value, and JSON decoding of one framed payload."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import orjson

from loadgen.errors import StreamProtocolError
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, ServerTimings, StreamEvent, Usage

CHAT_APIS = frozenset({"openai-chat", "openai-responses", "ollama-chat"})


def is_chat(api: str) -> bool:
    """Whether the API takes `messages` (else one `prompt` string)."""
    return api in CHAT_APIS


class Decoder(Protocol):
    done: bool  # the API's own end of stream was seen (DONE yielded)

    def decode(self, payload: bytes, t_ns: int, out: list[StreamEvent]) -> None:
        """Append the events one framed payload (arrived at `t_ns`) carries to `out`."""
        ...

    def finish(self, t_ns: int, out: list[StreamEvent]) -> None:
        """The body ended cleanly: an API whose stream has no end marker of its own (Triton)
        ends here; the others leave `done` False (the target calls that truncation)."""
        ...


class JsonEventDecoder:
    """What the decoders of JSON-event streams share (llama.cpp, TGI, Ollama, Responses,
    transcription): nothing is read after the API's own end, `[DONE]` ends the stream where the
    API sends it (`done_marker`), every other payload is one JSON object for `event`, and `end`
    appends the final usage (when there is one) and DONE. Without its end the stream is
    truncated: `finish` adds nothing and the target says so."""

    __slots__ = ("done",)
    done_marker: ClassVar[bool] = True  # `[DONE]` ends the stream (else it is not JSON)

    def __init__(self) -> None:
        self.done = False

    def decode(self, payload: bytes, t_ns: int, out: list[StreamEvent]) -> None:
        if self.done:
            return
        if self.done_marker and payload == b"[DONE]":
            self.end(t_ns, out)
            return
        self.event(loads_object(payload, t_ns), t_ns, out)

    def event(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        """Append the events of one JSON object payload (arrived at `t_ns`) to `out`."""
        raise NotImplementedError

    def end(self, t_ns: int, out: list[StreamEvent], usage: Usage | None = None) -> None:
        if usage is not None:
            out.append(StreamEvent(EventKind.USAGE, t_ns, usage=usage))
        self.done = True
        out.append(StreamEvent(EventKind.DONE, t_ns))

    def finish(self, t_ns: int, out: list[StreamEvent]) -> None:
        """The body ended without the API's end: truncated (the target says so)."""


BY_TYPE = "by-type"
"""An API's framing when its response's content type says which it is (speech: raw audio
bytes, or SSE): such an API has `typed_decoder` (`TypedStreams`)."""


class Api(Protocol):
    name: str
    framing: str  # "sse", "ndjson", or BY_TYPE
    content_type: str  # of the request body
    stream_types: tuple[str, ...]  # content types (prefixes) a streamed response may have
    end_marker: bytes | None  # bytes in a read that may end the stream (transport wake-ups)

    def path(self, spec: TargetSpec, streaming: bool) -> str:
        """The endpoint, relative to the base URL's path."""
        ...

    def models_path(self, spec: TargetSpec) -> str:
        """A cheap GET (model list or health), relative to the base URL's path."""
        ...

    def encode(self, spec: TargetSpec, request: PreparedRequest) -> tuple[bytes, bool]:
        """The body to send and whether the response will stream."""
        ...

    def decoder(self) -> Decoder: ...

    def decode_body(self, body: bytes, t_ns: int) -> list[StreamEvent]:
        """A whole non-streaming response (arrived at `t_ns`), ending in DONE."""
        ...

    def head_timings(self, headers: dict[str, str]) -> ServerTimings | None:
        """The server's timings from the response headers, when the API puts them there."""
        ...


class TypedStreams(Protocol):
    def typed_decoder(self, content_type: str, body: dict[str, Any]) -> tuple[str, Decoder]:
        """The framing ("sse" or "raw": every read is one payload) and decoder of a streamed
        response of `content_type` to a request of `body`."""
        ...


def stream_decoder(api: Api, content_type: str, body: dict[str, Any]) -> tuple[str, Decoder]:
    """The framing and decoder for a streamed response: the API's own, or the one its content
    type says (framing BY_TYPE)."""
    if api.framing != BY_TYPE:
        return api.framing, api.decoder()
    typed: TypedStreams = api  # type: ignore[assignment]  # BY_TYPE APIs implement it
    return typed.typed_decoder(content_type, body)


class SseApi:
    """The part every SSE API shares: its stream's content type, and no server timings in the
    response head (an API that puts them there says how: TGI)."""

    framing = "sse"
    content_type = "application/json"
    stream_types: tuple[str, ...] = ("text/event-stream",)

    def head_timings(self, headers: dict[str, str]) -> ServerTimings | None:
        return None


# OpenAI-shaped fields of a workload body that a native API is sent in its own terms, never as is
OPENAI_FIELDS = ("max_tokens", "max_completion_tokens", "stream_options", "messages", "prompt")


def body_streaming(spec: TargetSpec, request: PreparedRequest) -> tuple[dict[str, Any], bool]:
    """The workload's body and whether the response will stream (its `stream`, else the spec's)."""
    src = request.body
    return src, bool(src.get("stream", spec.stream))


def pass_through(body: dict[str, Any], src: dict[str, Any], drop: tuple[str, ...]) -> bytes:
    """`body` with every field of the workload's `src` not in `drop` added as it is, encoded."""
    body.update((k, v) for k, v in src.items() if k not in drop)
    return dumps(body)


def dumps(body: dict[str, Any]) -> bytes:
    return orjson.dumps(body)


def loads_object(payload: bytes, t_ns: int) -> dict[str, Any]:
    """One JSON object payload, or StreamProtocolError naming what it was."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        text = payload[:80].decode("utf-8", "replace")
        detail = " ".join(text.split())
        raise StreamProtocolError(f"event data is not JSON: {detail}", t_ns=t_ns) from None
    if type(obj) is not dict:
        raise StreamProtocolError("event data is not a JSON object", t_ns=t_ns)
    return obj


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt of a workload body: `prompt`, or the messages' contents joined."""
    if isinstance(body.get("prompt"), str):
        return str(body["prompt"])
    msgs = body.get("messages") or []
    return "\n\n".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))


def output_cap(body: dict[str, Any]) -> int | None:
    """The output cap the workload asked for, whatever the field is called."""
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        v = body.get(key)
        if type(v) is int:
            return v
    return None


def int_or_none(v: Any) -> int | None:
    return v if type(v) is int else None
