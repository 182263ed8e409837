"""Structured output in the workload: the spec's schema or forced tool goes out with every
request, and an answer that breaks it ends the request as a schema failure (counted like an
HTTP error) while one that fits passes; streamed answers are judged whole, however split."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loadgen.engine.workload import Prompt, request_body
from loadgen.results.records import Outcome
from loadgen.runspec.spec import spec_from_dict
from loadgen.target import EventKind, StreamEvent, Usage
from loadgen.targets import classify
from loadgen.targets.structured import StructuredOutputError, schema_error, structured_check
from tests.loadgen.targets.helpers import collect, make_target, request
from tests.support.sim import start_sim

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["answer"], "additionalProperties": False}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]
FAST = ["--preset", "fixed", "--ttft-ms", "1", "--itl-ms", "0.2"]


def test_schema_errors_name_what_breaks() -> None:
    assert schema_error({"answer": "x", "n": 2}, SCHEMA) is None
    assert schema_error({"n": 2}, SCHEMA) == "$ lacks required 'answer'"
    assert schema_error({"answer": 1}, SCHEMA) == "$.answer is int, not string"
    assert "forbids: z" in (schema_error({"answer": "x", "z": 1}, SCHEMA) or "")
    assert schema_error({"answer": "x", "n": True}, SCHEMA) == "$.n is bool, not integer"


def _events(kind: EventKind, parts: list[str]) -> list[StreamEvent]:
    return [StreamEvent(kind, i, p, 1) for i, p in enumerate(parts)]


def test_streamed_answers_are_judged_whole() -> None:
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}
    check = structured_check(body)
    assert check is not None
    check.feed(_events(EventKind.CONTENT, ['{"ans', 'wer": ', '"yes"}']))
    assert check.error() is None
    tool = structured_check({"tools": TOOLS, "tool_choice": "required"})
    assert tool is not None
    tool.feed(_events(EventKind.TOOL_CALL, ["f", '{"answer"', ": 3}"]))
    assert tool.error() == "$.answer is int, not string"
    assert structured_check({"tools": TOOLS, "tool_choice": "auto"}) is None  # not forced
    empty = structured_check({"tools": TOOLS, "tool_choice": {"function": {"name": "f"}}})
    assert empty is not None and "no tool call" in (empty.error() or "")


def test_a_broken_answer_is_described_without_quoting_it() -> None:
    """Answers are stored only when a run opts in: the failure names where the JSON broke,
    its length and whether the output cap cut it, never its text."""
    body = {"max_tokens": 4, "response_format": {"type": "json_schema",
                                                  "json_schema": {"schema": SCHEMA}}}  # fmt: skip
    cut = structured_check(body)
    assert cut is not None
    cut.feed(_events(EventKind.CONTENT, ['{"answer"', ": ", '"secret', " words"]))
    assert cut.error() == (
        "output is not JSON (Unterminated string starting at: line 1 column 12 (char 11); "
        "24 characters; cut at the output cap of 4 tokens before it closed)"
    )
    whole = structured_check({**body, "max_tokens": 64})
    assert whole is not None
    whole.feed(_events(EventKind.CONTENT, ["secret", " words"]))
    assert whole.error() == (
        "output is not JSON (Expecting value: line 1 column 1 (char 0); 12 characters)"
    )
    usage = structured_check(body)  # the server's count, where it gives one, is the count
    assert usage is not None
    usage.feed([*_events(EventKind.CONTENT, ['{"a']), StreamEvent(
        EventKind.USAGE, 9, usage=Usage(completion_tokens=4))])  # fmt: skip
    assert "cut at the output cap" in (usage.error() or "")
    several = structured_check({**body, "n": 2})  # then the usage counts every answer's tokens
    assert several is not None
    several.feed([*_events(EventKind.CONTENT, ['{"a']), StreamEvent(
        EventKind.USAGE, 9, usage=Usage(completion_tokens=4))])  # fmt: skip
    assert "cut at the output cap" not in (several.error() or "")


def test_the_spec_asks_every_request_for_it() -> None:
    base: dict[str, Any] = {"name": "s", "load": {"concurrency": [1], "duration_s": 5},
                            "target": {"api": "openai-chat", "base_url": "http://h/v1",
                                       "model": "m"}}  # fmt: skip
    spec = spec_from_dict({**base, "workload": {"output": {"json_schema": SCHEMA}}})
    body = request_body(spec, Prompt([{"role": "user", "content": "hi"}], 1, 4))
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    spec = spec_from_dict({**base, "workload": {"output": {"tools": TOOLS}}})
    body = request_body(spec, Prompt([{"role": "user", "content": "hi"}], 1, 4))
    assert (body["tools"], body["tool_choice"]) == (TOOLS, "required")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("what", ["response_format", "tools"])
def test_a_broken_answer_is_a_schema_failure_and_a_fitting_one_passes(
    what: str, stream: bool
) -> None:
    """Judged when the answer is whole: a JSON body, or a stream at its end marker (whose
    failure once ended the stream silently, recorded as "ended without a terminal event")."""
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    if what == "tools":
        body.update(tools=TOOLS, tool_choice="required")
        schema_ok = {"type": "object"}  # the sim's honoured call has arguments "{}"
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": schema_ok}}]
    else:
        fmt = {"name": "o", "schema": SCHEMA}
        body["response_format"] = {"type": "json_schema", "json_schema": fmt}
    results = {}
    for mode in ("honour", "ignore"):
        with start_sim([*FAST, "--param", f"{what}={mode}"]) as sim:
            target = make_target(sim.base_url, "raw", stream=stream)

            async def main() -> tuple[list[StreamEvent], BaseException | None]:
                try:
                    return await collect(target, request(**body))  # noqa: B023
                finally:
                    await target.aclose()  # noqa: B023

            results[mode] = asyncio.run(main())
    events, exc = results["honour"]
    assert exc is None and events[-1].kind == EventKind.DONE
    events, exc = results["ignore"]
    assert isinstance(exc, StructuredOutputError)
    assert EventKind.DONE not in [e.kind for e in events] and EventKind.CONTENT in [
        e.kind for e in events
    ]
    outcome, phase, _, detail = classify(exc)
    assert (outcome, phase) == (Outcome.STREAM_ERROR, "schema") and detail
