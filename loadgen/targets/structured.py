"""Structured output as part of the workload: when a request asks for JSON that fits a schema
(`response_format` json_schema) or forces a tool call (`tools` with `tool_choice` "required" or
a named function), the answer is checked as it completes; one that breaks the schema ends the
request as a `StructuredOutputError` (outcome stream_error, phase `schema`): a failure counted
like an HTTP error, not a silently wrong answer. The validator covers the JSON Schema keywords
structured-output APIs accept (type, properties, required, additionalProperties, items, enum).
"""

from __future__ import annotations

import json
from typing import Any

from loadgen.errors import StreamProtocolError
from loadgen.target import EventKind, StreamEvent

_decoder = json.JSONDecoder()
_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


class StructuredOutputError(StreamProtocolError):
    """The answer broke the JSON schema (or the forced tool call) the request asked for."""


def schema_error(value: Any, schema: Any, where: str = "$") -> str | None:
    """Why `value` does not fit `schema`, or None when it does."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_is(value, k) for k in kinds):
        return f"{where} is {type(value).__name__}, not {'/'.join(map(str, kinds))}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} is not one of the enum values"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key in schema.get("required") or []:
            if key not in value:
                return f"{where} lacks required {key!r}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                return f"{where} has properties the schema forbids: {', '.join(extra)}"
        for key, sub in props.items():
            if key in value and (err := schema_error(value[key], sub, f"{where}.{key}")):
                return err
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            if err := schema_error(item, schema["items"], f"{where}[{i}]"):
                return err
    return None


def _is(value: Any, kind: Any) -> bool:
    t = _TYPES.get(kind) if isinstance(kind, str) else None
    if t is None:
        return True
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, t)


def _first_json(text: str) -> Any:
    """The first JSON value in `text` (tool-call text is the name, then the arguments)."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object")
    value, _ = _decoder.raw_decode(text[start:])
    return value


class StructuredCheck:
    """Accumulates one answer's text (or tool-call text) and judges it at the end. What it
    says of a broken answer never quotes it (answers are stored only when a run opts in)."""

    __slots__ = ("cap", "parts", "schema", "tokens", "tool", "usage_counts")

    def __init__(
        self, schema: Any, tool: bool, cap: int | None = None, usage_counts: bool = True
    ) -> None:
        self.schema = schema
        self.tool = tool  # a forced tool call: its arguments are checked against `schema`
        self.cap = cap  # the request's output cap per answer (max_tokens), if it set one
        self.parts: list[str] = []
        self.tokens = 0  # the first answer's output tokens seen (reasoning included)
        self.usage_counts = usage_counts  # the usage's count is one answer's (n = 1)

    def feed(self, events: list[StreamEvent]) -> None:
        want = EventKind.TOOL_CALL if self.tool else EventKind.CONTENT
        for ev in events:
            if ev.kind is want and ev.choice == 0:
                self.parts.append(ev.text)
            if ev.kind is EventKind.USAGE and ev.usage and ev.usage.completion_tokens:
                if self.usage_counts:
                    self.tokens = max(self.tokens, ev.usage.completion_tokens)
            elif ev.kind in _OUTPUT and ev.choice == 0:
                self.tokens += ev.tokens

    def error(self) -> str | None:
        text = "".join(self.parts)
        if self.tool and not text:
            return "no tool call although one was required"
        try:
            value = _first_json(text) if self.tool else json.loads(text)
        except ValueError as exc:
            what = "tool-call arguments are" if self.tool else "output is"
            facts = [str(exc), f"{len(text)} characters"]  # json's message: where it broke
            if self.cap is not None and self.tokens >= self.cap:
                facts.append(f"cut at the output cap of {self.cap} tokens before it closed")
            return f"{what} not JSON ({'; '.join(facts)})"
        return schema_error(value, self.schema)


_OUTPUT = (EventKind.CONTENT, EventKind.TOOL_CALL, EventKind.REASONING)


def _cap(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if type(value) is int and value > 0:
            return value
    return None


def structured_check(body: dict[str, Any]) -> StructuredCheck | None:
    """The check a request body asks for, or None."""
    cap, one = _cap(body), body.get("n") in (None, 1)
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        if isinstance(spec, dict):
            return StructuredCheck(spec.get("schema"), tool=False, cap=cap, usage_counts=one)
    tools, choice = body.get("tools"), body.get("tool_choice")
    if isinstance(tools, list) and tools and (choice == "required" or isinstance(choice, dict)):
        name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and (name is None or fn.get("name") == name):
                return StructuredCheck(fn.get("parameters"), tool=True, cap=cap, usage_counts=one)
    return None
