"""`probe`: small requests that exercise exactly what a spec will send, and a verdict per
parameter: honoured (its effect shows), accepted (taken; its effect cannot be seen from here),
ignored (taken, but the response shows it had no effect: no logprobs, output longer than the
cap, fewer choices than `n`, output that breaks the schema), rejected (the server's error), or
inconclusive (rate limited, a server error, a response that cannot tell). Whole JSON answers
are read with a plain HTTP client; the streaming checks go through the target itself.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from loadgen.errors import HttpStatusError, PeakloadError, StreamProtocolError
from loadgen.spec import RunSpec, TargetSpec
from loadgen.target import EventKind, PreparedRequest, StreamEvent
from loadgen.targets.apis import is_chat
from loadgen.targets.openai import OpenAITarget
from loadgen.targets.openai_stream import body_summary

PROBE_TIMEOUT_S = 60.0
OPENAI_APIS = ("openai-chat", "openai-completions")
HONOURED, ACCEPTED, IGNORED, REJECTED, INCONCLUSIVE = (
    "honoured", "accepted", "ignored", "rejected", "inconclusive")  # fmt: skip
PROMPT = "Write one sentence about the sea."
SHORT_PROMPT = "Reply with just the word yes."
CAP = 8
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CHOICE = {"type": "function", "function": {"name": "get_weather"}}
# body keys a spec may carry -> the check that covers them
KEY_CHECKS = {"n": "n", "logprobs": "logprobs", "top_logprobs": "logprobs",
              "logit_bias": "logit_bias", "seed": "seed", "stop": "stop", "tools": "tools",
              "tool_choice": "tools", "response_format": "response_format",
              "reasoning_effort": "reasoning_effort", "ignore_eos": "ignore_eos"}  # fmt: skip
CHECKS = ("stream", "include_usage", "max_tokens", "max_completion_tokens", "ignore_eos", "n",
          "logprobs", "logit_bias", "seed", "stop", "tools", "response_format",
          "tools_with_schema", "reasoning_effort")  # fmt: skip


@dataclass(slots=True)
class Verdict:
    param: str
    verdict: str
    detail: str = ""


@dataclass(slots=True)
class ProbeResult:
    target: str  # the URL, without credentials
    api: str
    model: str
    probed_at: str
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def rejected(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.verdict == REJECTED]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Answer:
    status: int
    obj: dict[str, Any] | None
    error: str


class Prober:
    """Runs the checks against one target; `extra` holds the spec's own values to send."""

    def __init__(self, target: OpenAITarget, extra: dict[str, Any] | None = None) -> None:
        self.target = target
        self.spec: TargetSpec = target.spec
        self.chat = is_chat(self.spec.api)
        self.extra = extra or {}
        self.cap_field = self.spec.max_tokens_field if self.chat else "max_tokens"

    def _body(self, prompt: str = PROMPT, cap: int | None = CAP, **kw: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.spec.model, "stream": False}
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if cap is not None:
            body[self.cap_field] = cap
        body.update(kw)
        return body

    async def post(self, body: dict[str, Any], request_id: str | None = None) -> _Answer:
        url, headers = self.target.request_parts(False)
        headers["x-peakload-request-id"] = request_id or f"probe-{uuid.uuid4()}"
        headers["accept"] = "application/json"
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=PROBE_TIMEOUT_S) as client:
                r = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as e:
            return _Answer(0, None, f"no answer ({type(e).__name__})")
        ctype = r.headers.get("content-type", "")
        if not 200 <= r.status_code < 300:
            detail = self.target.scrub(body_summary(r.content[:4096], ctype))
            return _Answer(r.status_code, None, detail or f"HTTP {r.status_code}")
        try:
            obj = r.json()
        except ValueError:
            return _Answer(r.status_code, None, "the answer is not JSON")
        if not isinstance(obj, dict) or "error" in obj:
            return _Answer(r.status_code, None, self.target.scrub(str(obj)[:200]))
        return _Answer(r.status_code, obj, "")

    async def stream(self, body: dict[str, Any]) -> tuple[list[StreamEvent], Exception | None]:
        req = PreparedRequest(
            request_id=f"probe-{uuid.uuid4()}",
            body=body,
            deadline_s=PROBE_TIMEOUT_S,
            idle_timeout_s=PROBE_TIMEOUT_S,
        )
        events: list[StreamEvent] = []
        try:
            async for ev in self.target.stream(req, time.perf_counter_ns):
                events.append(ev)
        except PeakloadError as e:
            return events, e
        return events, None


def _failed(name: str, a: _Answer) -> Verdict | None:
    """The verdict of an answer that was not a 2xx JSON object, or None."""
    if a.obj is not None:
        return None
    if a.status in (400, 404, 409, 415, 422) or (400 <= a.status < 500 and a.status != 429):
        return Verdict(name, REJECTED, a.error)
    return Verdict(name, INCONCLUSIVE, a.error)


def _choice(obj: dict[str, Any]) -> dict[str, Any]:
    choices = obj.get("choices") or [{}]
    c = choices[0]
    return c if isinstance(c, dict) else {}


def _text(obj: dict[str, Any]) -> str:
    c = _choice(obj)
    msg = c.get("message")
    if isinstance(msg, dict):
        return str(msg.get("content") or "")
    return str(c.get("text") or "")


def _completion_tokens(obj: dict[str, Any]) -> int | None:
    u = obj.get("usage")
    v = u.get("completion_tokens") if isinstance(u, dict) else None
    return v if type(v) is int else None


def _stream_failure(name: str, exc: Exception) -> Verdict:
    if isinstance(exc, HttpStatusError):
        if exc.status != 429 and 400 <= exc.status < 500:
            return Verdict(name, REJECTED, exc.detail or str(exc))
        return Verdict(name, INCONCLUSIVE, str(exc))
    if isinstance(exc, StreamProtocolError) and "ignored stream=true" in str(exc):
        return Verdict(name, IGNORED, "a JSON answer came back, not a stream")
    return Verdict(name, INCONCLUSIVE, str(exc))


# ---------------------------------------------------------------- checks


async def check_stream(p: Prober) -> Verdict:
    events, exc = await p.stream(p._body(stream=True))
    if exc is not None:
        return _stream_failure("stream", exc)
    n = sum(1 for e in events if e.kind == EventKind.CONTENT)
    return Verdict("stream", HONOURED, f"{n} content events, then the end of stream")


async def check_include_usage(p: Prober) -> Verdict:
    body = p._body(stream=True, stream_options={"include_usage": True})
    events, exc = await p.stream(body)
    if exc is not None:
        return _stream_failure("include_usage", exc)
    if any(e.kind == EventKind.USAGE for e in events):
        return Verdict("include_usage", HONOURED, "usage came with the stream")
    return Verdict("include_usage", IGNORED, "no usage in the stream")


async def _cap(p: Prober, name: str) -> Verdict:
    body = p._body(cap=None)
    body[name] = 4
    a = await p.post(body)
    if (v := _failed(name, a)) is not None:
        return v
    assert a.obj is not None
    n = _completion_tokens(a.obj)
    words = len(_text(a.obj).split())
    if n is not None:
        if n > 4:
            return Verdict(name, IGNORED, f"output longer than {name}=4: {n} tokens")
        return Verdict(name, HONOURED, f"{n} tokens for a cap of 4")
    if words > 4:
        return Verdict(name, IGNORED, f"output longer than {name}=4: {words} words")
    return Verdict(name, ACCEPTED, "no usage reported: the cap cannot be checked exactly")


async def check_max_tokens(p: Prober) -> Verdict:
    return await _cap(p, "max_tokens")


async def check_max_completion_tokens(p: Prober) -> Verdict:
    return await _cap(p, "max_completion_tokens")


async def check_ignore_eos(p: Prober) -> Verdict:
    cap = 24
    a = await p.post(p._body(SHORT_PROMPT, cap=cap, ignore_eos=True))
    if (v := _failed("ignore_eos", a)) is not None:
        return v
    assert a.obj is not None
    n = _completion_tokens(a.obj)
    if n is None:
        return Verdict("ignore_eos", INCONCLUSIVE, "no usage reported")
    if n >= cap:
        return Verdict("ignore_eos", HONOURED, f"{n} tokens: generation ran to the cap")
    return Verdict("ignore_eos", IGNORED, f"stopped at {n} of {cap} tokens (an end of sequence)")


async def check_n(p: Prober) -> Verdict:
    n = p.extra.get("n") if type(p.extra.get("n")) is int and p.extra["n"] > 1 else 2
    a = await p.post(p._body(n=n, temperature=1.0))
    if (v := _failed("n", a)) is not None:
        return v
    assert a.obj is not None
    got = len(a.obj.get("choices") or [])
    if got == n:
        return Verdict("n", HONOURED, f"{got} choices")
    return Verdict("n", IGNORED, f"n={n} choices asked, {got} returned")


async def check_logprobs(p: Prober) -> Verdict:
    kw: dict[str, Any] = {"logprobs": True, "top_logprobs": 1} if p.chat else {"logprobs": 1}
    a = await p.post(p._body(**kw))
    if (v := _failed("logprobs", a)) is not None:
        return v
    assert a.obj is not None
    lp = _choice(a.obj).get("logprobs")
    if lp and (not isinstance(lp, dict) or lp.get("content") or lp.get("tokens")):
        return Verdict("logprobs", HONOURED, "logprobs returned")
    return Verdict("logprobs", IGNORED, "no logprobs returned")


async def check_logit_bias(p: Prober) -> Verdict:
    bias = p.extra.get("logit_bias") or {"0": -1}
    a = await p.post(p._body(logit_bias=bias))
    if (v := _failed("logit_bias", a)) is not None:
        return v
    return Verdict("logit_bias", ACCEPTED, "taken; its effect is not visible in one answer")


SEED_TRIES = 4  # outputs that agree by chance (a small vocabulary, a sure model) rarely agree 4x


async def check_seed(p: Prober) -> Verdict:
    body = p._body(seed=1234, temperature=1.0)
    texts: list[str] = []
    for _ in range(SEED_TRIES):
        a = await p.post(body)
        if (v := _failed("seed", a)) is not None:
            return v
        assert a.obj is not None
        texts.append(_text(a.obj))
    if len(set(texts)) == 1:
        return Verdict("seed", HONOURED, f"the same seed gave the same output {SEED_TRIES} times")
    return Verdict("seed", IGNORED, "the same seed gave different outputs at temperature 1")


async def check_stop(p: Prober) -> Verdict:
    rid = f"probe-stop-{uuid.uuid4()}"  # the same id twice: a simulator keys its text on it
    first = await p.post(p._body(cap=16, temperature=0.0, seed=7), rid)
    if (v := _failed("stop", first)) is not None:
        return v
    assert first.obj is not None
    words = _text(first.obj).split()
    if len(words) < 4:
        return Verdict("stop", INCONCLUSIVE, "the output was too short to choose a stop word")
    stop = " " + words[2]
    second = await p.post(p._body(cap=16, temperature=0.0, seed=7, stop=[stop]), rid)
    if (v := _failed("stop", second)) is not None:
        return v
    assert second.obj is not None
    if stop in _text(second.obj):
        return Verdict("stop", IGNORED, f"the output still contains the stop string {stop!r}")
    return Verdict("stop", HONOURED, f"the output ends before {stop!r}")


def _tool_calls(obj: dict[str, Any]) -> list[Any]:
    msg = _choice(obj).get("message")
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
    if (v := _failed("tools", a)) is not None:
        return v
    assert a.obj is not None
    if _tool_calls(a.obj):
        return Verdict("tools", HONOURED, "a tool call came back")
    return Verdict("tools", IGNORED, "tool_choice forced a call, but none came back")


SCHEMA_CAP = 256  # room for the JSON to close: a cut answer says nothing about the schema


def _cut(obj: dict[str, Any]) -> bool:
    """A JSON answer cut at the cap (prose that hit the cap broke the schema all the same)."""
    return _choice(obj).get("finish_reason") == "length" and _text(obj).lstrip()[:1] == "{"


async def check_response_format(p: Prober) -> Verdict:
    body = p._body("Answer in JSON: what colour is the sky?", cap=SCHEMA_CAP, temperature=0.0)
    body["response_format"] = RESPONSE_FORMAT
    a = await p.post(body)
    if (v := _failed("response_format", a)) is not None:
        return v
    assert a.obj is not None
    if _schema_ok(_text(a.obj)):
        return Verdict("response_format", HONOURED, "the output matches the JSON schema")
    if _cut(a.obj):
        return Verdict("response_format", INCONCLUSIVE, f"cut at {SCHEMA_CAP} tokens")
    return Verdict("response_format", IGNORED, "the output breaks the JSON schema")


async def check_tools_with_schema(p: Prober) -> Verdict:
    body = p._body("What is the weather in Paris?", cap=SCHEMA_CAP, temperature=0.0)
    body.update(tools=TOOLS, tool_choice="auto", response_format=RESPONSE_FORMAT)
    a = await p.post(body)
    if (v := _failed("tools_with_schema", a)) is not None:
        return v
    assert a.obj is not None
    if _tool_calls(a.obj) or _schema_ok(_text(a.obj)):
        return Verdict("tools_with_schema", HONOURED, "a tool call or schema-valid output")
    if _cut(a.obj):
        return Verdict("tools_with_schema", INCONCLUSIVE, f"cut at {SCHEMA_CAP} tokens")
    return Verdict("tools_with_schema", IGNORED, "neither a tool call nor schema-valid output")


async def check_reasoning_effort(p: Prober) -> Verdict:
    a = await p.post(p._body(reasoning_effort=p.extra.get("reasoning_effort", "low")))
    if (v := _failed("reasoning_effort", a)) is not None:
        return v
    assert a.obj is not None
    msg = _choice(a.obj).get("message")
    seen = isinstance(msg, dict) and (msg.get("reasoning_content") or msg.get("reasoning"))
    return Verdict("reasoning_effort", ACCEPTED, "reasoning text returned" if seen else "taken")


def generic(key: str, value: Any) -> Callable[[Prober], Awaitable[Verdict]]:
    """A body key with no check of its own: sent with the spec's value, accepted or not."""

    async def run(p: Prober) -> Verdict:
        a = await p.post(p._body(**{key: value}))
        if (v := _failed(key, a)) is not None:
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
CHAT_ONLY = {"tools", "response_format", "tools_with_schema", "reasoning_effort",
             "max_completion_tokens"}  # fmt: skip


def spec_checks(spec: RunSpec) -> tuple[list[str], dict[str, Any]]:
    """The checks covering what this spec will send, and the spec's own values of its keys."""
    t = spec.target
    names = ["stream"] if t.stream else []
    if t.stream and t.include_usage:
        names.append("include_usage")
    names.append(t.max_tokens_field if is_chat(t.api) else "max_tokens")
    if t.ignore_eos:
        names.append("ignore_eos")
    extra = {**spec.labels.generation, **t.extra_body}
    for key in extra:
        names.append(KEY_CHECKS.get(key, f"key:{key}"))
    if "tools" in extra and "response_format" in extra:
        names.append("tools_with_schema")
    return list(dict.fromkeys(names)), extra


async def probe(
    target: OpenAITarget, checks: list[str] | None = None, extra: dict[str, Any] | None = None
) -> ProbeResult:
    """Run `checks` (default: all that apply to the target's API), one after another."""
    p = Prober(target, extra)
    api = target.spec.api
    result = ProbeResult(
        target=target.display_url,
        api=api,
        model=target.spec.model,
        probed_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    names = list(checks) if checks is not None else list(CHECKS)
    for name in names:
        if name.startswith("key:"):
            key = name.removeprefix("key:")
            if api not in OPENAI_APIS:
                result.verdicts.append(Verdict(key, INCONCLUSIVE, f"not probed for {api}"))
                continue
            result.verdicts.append(await generic(key, p.extra.get(key))(p))
            continue
        fn = CHECK_FUNCS[name]
        if name in ("stream", "include_usage"):
            if name == "include_usage" and api not in OPENAI_APIS:
                continue
        elif api not in OPENAI_APIS:
            result.verdicts.append(Verdict(name, INCONCLUSIVE, f"not probed for {api}"))
            continue
        elif name in CHAT_ONLY and not p.chat:
            continue
        result.verdicts.append(await fn(p))
    return result


def probe_sync(
    target_spec: TargetSpec, checks: list[str] | None = None, extra: dict[str, Any] | None = None
) -> ProbeResult:
    """`probe` on a fresh event loop with its own target (for commands)."""

    async def main() -> ProbeResult:
        target = OpenAITarget(target_spec, max_connections=2)
        try:
            return await probe(target, checks, extra)
        finally:
            await target.aclose()

    return asyncio.run(main())
