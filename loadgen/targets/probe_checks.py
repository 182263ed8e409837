"""One check per request parameter the probe knows: each sends what exercises it and judges the
answer — honoured, accepted, ignored (from the response), rejected or inconclusive."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from loadgen.target import EventKind
from loadgen.targets.prober import (
    ACCEPTED,
    HONOURED,
    IGNORED,
    INCONCLUSIVE,
    OPENAI_APIS,
    RESPONSE_FORMAT,
    SHORT_PROMPT,
    TOOL_CHOICE,
    TOOLS,
    Prober,
    Verdict,
    answer_text,
    completion_tokens,
    failed_verdict,
    first_choice,
    stream_failure,
)


async def check_stream(p: Prober) -> Verdict:
    events, exc = await p.stream(p._body(stream=True))
    if exc is not None:
        return stream_failure("stream", exc)
    n = sum(1 for e in events if e.kind == EventKind.CONTENT)
    return Verdict("stream", HONOURED, f"{n} content events, then the end of stream")


async def check_include_usage(p: Prober) -> Verdict:
    body = p._body(stream=True, stream_options={"include_usage": True})
    events, exc = await p.stream(body)
    if exc is not None:
        return stream_failure("include_usage", exc)
    if any(e.kind == EventKind.USAGE for e in events):
        return Verdict("include_usage", HONOURED, "usage came with the stream")
    return Verdict("include_usage", IGNORED, "no usage in the stream")


async def _cap(p: Prober, name: str) -> Verdict:
    body = p._body(cap=None)
    body[name] = 4
    a = await p.post(body)
    if (v := failed_verdict(name, a)) is not None:
        return v
    assert a.obj is not None
    n = completion_tokens(a.obj)
    words = len(answer_text(a.obj).split())
    if n is not None:
        if n > 4:
            return Verdict(name, IGNORED, f"output longer than {name}=4: {n} tokens")
        return Verdict(name, HONOURED, f"{n} tokens for a cap of 4")
    if words > 4:
        return Verdict(name, IGNORED, f"output longer than {name}=4: {words} words")
    return Verdict(name, ACCEPTED, "no usage reported: the cap cannot be checked exactly")


async def check_max_tokens(p: Prober) -> Verdict:
    if p.spec.api not in OPENAI_APIS:
        return await _native_cap(p)
    return await _cap(p, "max_tokens")


async def _native_cap(p: Prober) -> Verdict:
    """The output cap of a native API (each module names it: num_predict, max_new_tokens,
    n_predict, max_tokens), streamed through the target: usage, else the deltas counted."""
    body = p._body(cap=None, stream=True)
    body["max_tokens"] = 4
    events, exc = await p.stream(body)
    if exc is not None:
        return stream_failure("max_tokens", exc)
    usage = [e.usage for e in events if e.kind == EventKind.USAGE and e.usage is not None]
    n = usage[-1].completion_tokens if usage else None
    what = "tokens"
    if n is None:
        n, what = sum(e.tokens for e in events if e.kind == EventKind.CONTENT), "deltas"
    if n > 4:
        return Verdict("max_tokens", IGNORED, f"output longer than the cap of 4: {n} {what}")
    return Verdict("max_tokens", HONOURED, f"{n} {what} for a cap of 4")


async def check_max_completion_tokens(p: Prober) -> Verdict:
    return await _cap(p, "max_completion_tokens")


async def check_ignore_eos(p: Prober) -> Verdict:
    cap = 24
    a = await p.post(p._body(SHORT_PROMPT, cap=cap, ignore_eos=True))
    if (v := failed_verdict("ignore_eos", a)) is not None:
        return v
    assert a.obj is not None
    n = completion_tokens(a.obj)
    if n is None:
        return Verdict("ignore_eos", INCONCLUSIVE, "no usage reported")
    if n >= cap:
        return Verdict("ignore_eos", HONOURED, f"{n} tokens: generation ran to the cap")
    return Verdict("ignore_eos", IGNORED, f"stopped at {n} of {cap} tokens (an end of sequence)")


async def check_n(p: Prober) -> Verdict:
    n = p.extra.get("n") if type(p.extra.get("n")) is int and p.extra["n"] > 1 else 2
    a = await p.post(p._body(n=n, temperature=1.0))
    if (v := failed_verdict("n", a)) is not None:
        return v
    assert a.obj is not None
    got = len(a.obj.get("choices") or [])
    if got == n:
        return Verdict("n", HONOURED, f"{got} choices")
    return Verdict("n", IGNORED, f"n={n} choices asked, {got} returned")


async def check_logprobs(p: Prober) -> Verdict:
    kw: dict[str, Any] = {"logprobs": True, "top_logprobs": 1} if p.chat else {"logprobs": 1}
    a = await p.post(p._body(**kw))
    if (v := failed_verdict("logprobs", a)) is not None:
        return v
    assert a.obj is not None
    lp = first_choice(a.obj).get("logprobs")
    if lp and (not isinstance(lp, dict) or lp.get("content") or lp.get("tokens")):
        return Verdict("logprobs", HONOURED, "logprobs returned")
    return Verdict("logprobs", IGNORED, "no logprobs returned")


async def check_logit_bias(p: Prober) -> Verdict:
    bias = p.extra.get("logit_bias") or {"0": -1}
    a = await p.post(p._body(logit_bias=bias))
    if (v := failed_verdict("logit_bias", a)) is not None:
        return v
    return Verdict("logit_bias", ACCEPTED, "taken; its effect is not visible in one answer")


SEED_TRIES = 4  # outputs that agree by chance (a small vocabulary, a sure model) rarely agree 4x


async def check_seed(p: Prober) -> Verdict:
    body = p._body(seed=1234, temperature=1.0)
    texts: list[str] = []
    for _ in range(SEED_TRIES):
        a = await p.post(body)
        if (v := failed_verdict("seed", a)) is not None:
            return v
        assert a.obj is not None
        texts.append(answer_text(a.obj))
    if len(set(texts)) == 1:
        return Verdict("seed", HONOURED, f"the same seed gave the same output {SEED_TRIES} times")
    return Verdict("seed", IGNORED, "the same seed gave different outputs at temperature 1")


async def check_stop(p: Prober) -> Verdict:
    rid = f"probe-stop-{uuid.uuid4()}"  # the same id twice: a simulator keys its text on it
    first = await p.post(p._body(cap=16, temperature=0.0, seed=7), rid)
    if (v := failed_verdict("stop", first)) is not None:
        return v
    assert first.obj is not None
    words = answer_text(first.obj).split()
    if len(words) < 4:
        return Verdict("stop", INCONCLUSIVE, "the output was too short to choose a stop word")
    stop = " " + words[2]
    second = await p.post(p._body(cap=16, temperature=0.0, seed=7, stop=[stop]), rid)
    if (v := failed_verdict("stop", second)) is not None:
        return v
    assert second.obj is not None
    if stop in answer_text(second.obj):
        return Verdict("stop", IGNORED, f"the output still contains the stop string {stop!r}")
    return Verdict("stop", HONOURED, f"the output ends before {stop!r}")


def _tool_calls(obj: dict[str, Any]) -> list[Any]:
    msg = first_choice(obj).get("message")
    calls = msg.get("tool_calls") if isinstance(msg, dict) else None
    return calls if isinstance(calls, list) else []


def _schema_ok(text: str) -> bool:
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return isinstance(v, dict) and isinstance(v.get("answer"), str) and set(v) == {"answer"}


async def check_tools(p: Prober) -> Verdict:
    tools = p.extra.get("tools") or TOOLS
    choice = p.extra.get("tool_choice") or TOOL_CHOICE
    a = await p.post(p._body("What is the weather in Paris?", cap=64, tools=tools,
                             tool_choice=choice))  # fmt: skip
    if (v := failed_verdict("tools", a)) is not None:
        return v
    assert a.obj is not None
    if _tool_calls(a.obj):
        return Verdict("tools", HONOURED, "a tool call came back")
    return Verdict("tools", IGNORED, "tool_choice forced a call, but none came back")


SCHEMA_CAP = 256  # room for the JSON to close: a cut answer says nothing about the schema


def _cut(obj: dict[str, Any]) -> bool:
    """A JSON answer cut at the cap (prose that hit the cap broke the schema all the same)."""
    return (
        first_choice(obj).get("finish_reason") == "length" and answer_text(obj).lstrip()[:1] == "{"
    )


async def check_response_format(p: Prober) -> Verdict:
    body = p._body("Answer in JSON: what colour is the sky?", cap=SCHEMA_CAP, temperature=0.0)
    body["response_format"] = RESPONSE_FORMAT
    a = await p.post(body)
    if (v := failed_verdict("response_format", a)) is not None:
        return v
    assert a.obj is not None
    if _schema_ok(answer_text(a.obj)):
        return Verdict("response_format", HONOURED, "the output matches the JSON schema")
    if _cut(a.obj):
        return Verdict("response_format", INCONCLUSIVE, f"cut at {SCHEMA_CAP} tokens")
    return Verdict("response_format", IGNORED, "the output breaks the JSON schema")


async def check_tools_with_schema(p: Prober) -> Verdict:
    body = p._body("What is the weather in Paris?", cap=SCHEMA_CAP, temperature=0.0)
    body.update(tools=TOOLS, tool_choice="auto", response_format=RESPONSE_FORMAT)
    a = await p.post(body)
    if (v := failed_verdict("tools_with_schema", a)) is not None:
        return v
    assert a.obj is not None
    if _tool_calls(a.obj) or _schema_ok(answer_text(a.obj)):
        return Verdict("tools_with_schema", HONOURED, "a tool call or schema-valid output")
    if _cut(a.obj):
        return Verdict("tools_with_schema", INCONCLUSIVE, f"cut at {SCHEMA_CAP} tokens")
    return Verdict("tools_with_schema", IGNORED, "neither a tool call nor schema-valid output")


async def check_reasoning_effort(p: Prober) -> Verdict:
    a = await p.post(p._body(reasoning_effort=p.extra.get("reasoning_effort", "low")))
    if (v := failed_verdict("reasoning_effort", a)) is not None:
        return v
    assert a.obj is not None
    msg = first_choice(a.obj).get("message")
    seen = isinstance(msg, dict) and (msg.get("reasoning_content") or msg.get("reasoning"))
    return Verdict("reasoning_effort", ACCEPTED, "reasoning text returned" if seen else "taken")


def generic(key: str, value: Any) -> Callable[[Prober], Awaitable[Verdict]]:
    """A body key with no check of its own: sent with the spec's value, accepted or not."""

    async def run(p: Prober) -> Verdict:
        a = await p.post(p._body(**{key: value}))
        if (v := failed_verdict(key, a)) is not None:
            return v
        return Verdict(key, ACCEPTED, "taken; no effect checked")

    return run


CHECK_FUNCS: dict[str, Callable[[Prober], Awaitable[Verdict]]] = {
    "stream": check_stream,
    "include_usage": check_include_usage,
    "max_tokens": check_max_tokens,
    "max_completion_tokens": check_max_completion_tokens,
    "ignore_eos": check_ignore_eos,
    "n": check_n,
    "logprobs": check_logprobs,
    "logit_bias": check_logit_bias,
    "seed": check_seed,
    "stop": check_stop,
    "tools": check_tools,
    "response_format": check_response_format,
    "tools_with_schema": check_tools_with_schema,
    "reasoning_effort": check_reasoning_effort,
}
