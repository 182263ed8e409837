"""OpenAI chat/completions payloads -> `StreamEvent`s: one streamed SSE `data` payload at a time,
or a whole non-streaming JSON body. Pure functions of bytes and a given arrival time (`t_ns`,
monotonic ns from the runner's clock); no I/O, no clock reads.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from loadgen.errors import InBandError, StreamProtocolError
from loadgen.target import EventKind, ServerTimings, StreamEvent, Usage

MAX_DETAIL_CHARS = 200
_loads = orjson.loads  # several times faster than json per event; same objects
_raw_decode = json.JSONDecoder().raw_decode
_CONTENT = EventKind.CONTENT
_REASONING = EventKind.REASONING
_TOOL_CALL = EventKind.TOOL_CALL
_USAGE = EventKind.USAGE
_DONE = EventKind.DONE


def short(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """Collapse whitespace and cut to `limit` characters (for error details)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_usage(obj: Any) -> Usage | None:
    """The `usage` block of a chunk or body, or None when absent/null/malformed."""
    if not isinstance(obj, dict):
        return None
    details = obj.get("completion_tokens_details")
    reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    prompt_details = obj.get("prompt_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    return Usage(
        prompt_tokens=_int_or_none(obj.get("prompt_tokens")),
        completion_tokens=_int_or_none(obj.get("completion_tokens")),
        reasoning_tokens=_int_or_none(reasoning),
        cached_tokens=_int_or_none(cached),
    )


def parse_llamacpp_timings(obj: Any) -> ServerTimings | None:
    """llama.cpp's `timings` object (prompt_n/prompt_ms: prompt evaluation; predicted_n/
    predicted_ms: generation; cache_n: prompt tokens reused from the slot's cache), or None."""
    if not isinstance(obj, dict):
        return None
    return ServerTimings(
        prompt_tokens=_int_or_none(obj.get("prompt_n")),
        prefill_ms=_float_or_none(obj.get("prompt_ms")),
        decode_tokens=_int_or_none(obj.get("predicted_n")),
        decode_ms=_float_or_none(obj.get("predicted_ms")),
        cached_tokens=_int_or_none(obj.get("cache_n")),
    )


def parse_provider_times(obj: dict[str, Any], base: ServerTimings | None) -> ServerTimings:
    """`queue_time`, `prompt_time`, `completion_time` (seconds) as hosted APIs report them."""
    t = base if base is not None else ServerTimings()
    for key, attr in (("queue_time", "queue_ms"), ("prompt_time", "prefill_ms"),
                      ("completion_time", "decode_ms")):  # fmt: skip
        v = _float_or_none(obj.get(key))
        if v is not None:
            setattr(t, attr, v * 1000.0)
    n = _int_or_none(obj.get("completion_tokens"))
    if n is not None:
        t.decode_tokens = n
    return t


def _int_or_none(v: Any) -> int | None:
    return v if type(v) is int else None


def _float_or_none(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) else None


def _error_message(err: Any) -> str:
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or err.get("type") or err.get("code")
        return short(str(msg if msg is not None else err))
    return short(str(err))


class OpenAIStreamDecoder:
    """Turns each SSE data payload of a streamed chat or completions response into events.

    CONTENT: `choices[0].delta.content` (chat) or `choices[0].text` (completions);
    REASONING: `delta.reasoning_content` or `delta.reasoning`; TOOL_CALL: `delta.tool_calls`
    (text = the argument fragments). Each non-empty delta counts `tokens=1`; the runner
    reconciles with USAGE. Role-only and empty deltas yield nothing. USAGE is yielded every time
    a non-null `usage` appears (some servers send it on every chunk: the last one wins).
    `[DONE]` yields DONE; payloads after it are ignored. `{"error": ...}` raises InBandError.
    A `timings` object (llama.cpp) is the server's own account: it rides on the USAGE event,
    merged with the usage block whichever chunk each came in.
    """

    __slots__ = ("done", "timings", "usage")

    def __init__(self) -> None:
        self.done = False
        self.timings: ServerTimings | None = None
        self.usage: Usage | None = None

    def finish(self, t_ns: int, out: list[StreamEvent]) -> None:
        """The body ended: without `[DONE]` that is a truncated stream (the target's call)."""

    def decode(self, payload: bytes, t_ns: int, out: list[StreamEvent]) -> None:
        """Append the events carried by one payload (arrived at `t_ns`) to `out`."""
        if self.done:
            return
        if payload == b"[DONE]":
            self.done = True
            out.append(StreamEvent(_DONE, t_ns))
            return
        try:
            obj = _loads(payload)
        except ValueError:  # orjson is strict: retry with the standard library's dialect
            obj = _lenient_loads(payload, t_ns)
        if type(obj) is not dict:
            raise StreamProtocolError("event data is not a JSON object", t_ns=t_ns)
        try:
            self._events(obj, t_ns, out)
        except (AttributeError, TypeError, IndexError, KeyError):
            raise StreamProtocolError("event data has an unexpected shape", t_ns=t_ns) from None

    def _events(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        before = len(out)
        choices = obj.get("choices")
        if choices:
            for choice in choices:  # n > 1: every choice's deltas, each marked with its index
                first = len(out)
                delta = choice.get("delta")
                if delta is not None:
                    content = delta.get("content")
                    if content:
                        out.append(StreamEvent(_CONTENT, t_ns, _text(content, t_ns), 1))
                    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                    if reasoning:
                        out.append(StreamEvent(_REASONING, t_ns, _text(reasoning, t_ns), 1))
                    calls = delta.get("tool_calls")
                    if calls:
                        out.append(StreamEvent(_TOOL_CALL, t_ns, _tool_text(calls), 1))
                else:
                    text = choice.get("text")
                    if text:
                        out.append(StreamEvent(_CONTENT, t_ns, _text(text, t_ns), 1))
                index = choice.get("index")
                if index and type(index) is int:
                    for ev in out[first:]:
                        ev.choice = index
        elif "error" in obj or obj.get("object") == "error":
            raise InBandError(f"in-band error: {_error_message(obj.get('error', obj))}", t_ns=t_ns)
        usage = obj.get("usage")
        timings = obj.get("timings")
        if usage or timings:
            if "time_info" in obj and isinstance(obj["time_info"], dict):
                self.timings = parse_provider_times(obj["time_info"], self.timings)
            self._usage_event(usage, timings, t_ns, out)
        elif len(out) == before and ("x_groq" in obj or "time_info" in obj):  # a closing chunk
            self._provider_usage(obj, t_ns, out)

    def _provider_usage(self, obj: dict[str, Any], t_ns: int, out: list[StreamEvent]) -> None:
        """Groq's `x_groq.usage` (counts and queue/prompt/completion times, s) and Cerebras's
        `time_info` (the same times): the server's own account, on the USAGE event."""
        xg = obj.get("x_groq")
        src = xg.get("usage") if isinstance(xg, dict) else obj.get("time_info")
        if not isinstance(src, dict):
            return
        self.timings = parse_provider_times(src, self.timings)
        u = parse_usage(src) if "prompt_tokens" in src else self.usage
        u = u if u is not None else Usage()
        u.server = self.timings
        self.usage = u
        out.append(StreamEvent(_USAGE, t_ns, usage=u))

    def _times(self, usage: Any) -> dict[str, Any] | None:
        """Provider times beside a usage block: in it (Groq's), or not at all here."""
        if isinstance(usage, dict) and "queue_time" in usage:
            return usage
        return None

    def _usage_event(self, usage: Any, timings: Any, t_ns: int, out: list[StreamEvent]) -> None:
        """USAGE carrying the latest usage counts and the server's timings, merged (the runner
        keeps the last USAGE event; the two may come in different chunks, in either order)."""
        if timings:
            self.timings = parse_llamacpp_timings(timings)
        info = self._times(usage)
        if info is not None:
            self.timings = parse_provider_times(info, self.timings)
        u = parse_usage(usage) if usage else self.usage
        if u is None:
            u = Usage()
        if self.timings is not None:
            u.server = self.timings
        self.usage = u
        out.append(StreamEvent(_USAGE, t_ns, usage=u))


def _lenient_loads(payload: bytes, t_ns: int) -> Any:
    """The standard library's reading (NaN/Infinity, huge integers), or StreamProtocolError."""
    try:
        text = payload.decode()
        obj, end = _raw_decode(text.lstrip())
        if text.lstrip()[end:].strip():
            raise ValueError("extra data")
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        raise StreamProtocolError(
            f"event data is not JSON: {short(payload[:80].decode('utf-8', 'replace'))}",
            t_ns=t_ns,
        ) from None
    return obj


def _text(v: Any, t_ns: int) -> str:
    if type(v) is not str:
        raise StreamProtocolError(f"delta text is {type(v).__name__}, not a string", t_ns=t_ns)
    return v


def _tool_text(calls: Any) -> str:
    parts: list[str] = []
    if isinstance(calls, list):
        for call in calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                parts.extend(str(fn[k]) for k in ("name", "arguments") if fn.get(k))
    return "".join(parts)


def decode_body(body: bytes, t_ns: int) -> list[StreamEvent]:
    """A complete non-streaming JSON response (arrived at `t_ns`): REASONING and CONTENT with the
    whole text (tokens=1 each), TOOL_CALL, USAGE, then DONE. An `error` body raises InBandError."""
    try:
        obj = json.loads(body)
    except ValueError:
        raise StreamProtocolError("response body is not JSON", t_ns=t_ns) from None
    if not isinstance(obj, dict):
        raise StreamProtocolError("response body is not a JSON object", t_ns=t_ns)
    if "error" in obj or obj.get("object") == "error":
        raise InBandError(f"error body: {_error_message(obj.get('error', obj))}", t_ns=t_ns)
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise StreamProtocolError("response body has no choices", t_ns=t_ns)
    out: list[StreamEvent] = []
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise StreamProtocolError("response body has a malformed choice", t_ns=t_ns)
        first = len(out)
        message = choice.get("message")
        if isinstance(message, dict):
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if reasoning:
                out.append(StreamEvent(_REASONING, t_ns, _text(reasoning, t_ns), 1))
            content = message.get("content")
            if content:
                out.append(StreamEvent(_CONTENT, t_ns, _text(content, t_ns), 1))
            if message.get("tool_calls"):
                out.append(StreamEvent(_TOOL_CALL, t_ns, _tool_text(message["tool_calls"]), 1))
        elif choice.get("text"):
            out.append(StreamEvent(_CONTENT, t_ns, _text(choice["text"], t_ns), 1))
        index = choice.get("index", i)
        for ev in out[first:]:
            ev.choice = index if type(index) is int else i
    usage = parse_usage(obj.get("usage"))
    timings = parse_llamacpp_timings(obj.get("timings"))
    if usage is not None or timings is not None:
        usage = usage or Usage()
        usage.server = timings
        out.append(StreamEvent(_USAGE, t_ns, usage=usage))
    out.append(StreamEvent(_DONE, t_ns))
    return out


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def body_summary(body: bytes, content_type: str) -> str:
    """A short, human-readable summary of an error/unexpected body (never its headers)."""
    ct = content_type.split(";")[0].strip().lower()
    if "json" in ct or body[:1] in (b"{", b"["):
        try:
            obj = json.loads(body)
        except ValueError:
            pass
        else:
            if isinstance(obj, dict):
                err = obj.get("error", obj.get("detail", obj.get("message")))
                if err is not None:
                    return _error_message(err)
            return short(json.dumps(obj))
    if "html" in ct or body.lstrip()[:1] == b"<":
        m = _TITLE.search(body)
        title = short(m.group(1).decode("utf-8", "replace"), 80) if m else ""
        return f"HTML page{': ' + title if title else ''}"
    return short(body.decode("utf-8", "replace"))
