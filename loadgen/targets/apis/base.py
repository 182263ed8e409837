"""What every wire API provides to the target (`Api`, `Decoder`), and helpers they share: the
prompt text of a chat body, the output cap's value, and JSON decoding of one framed payload."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from loadgen.errors import StreamProtocolError
from loadgen.spec import TargetSpec
from loadgen.target import PreparedRequest, ServerTimings, StreamEvent

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


class Api(Protocol):
    name: str
    framing: str  # "sse" or "ndjson"
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


def float_or_none(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) else None


def no_head_timings(headers: dict[str, str]) -> ServerTimings | None:
    return None
