"""The probe's client and its findings: `Prober` sends one small request (a whole JSON answer
through a plain HTTP client, or a stream through the target itself) and `Verdict`s say what the
target did with a parameter; helpers read the answers (loadgen.targets.probe_checks uses them).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from loadgen.errors import (
    HttpStatusError,
    PeakloadError,
    PhaseTimeout,
    PreflightError,
    StreamProtocolError,
)
from loadgen.runspec.target_spec import TargetSpec
from loadgen.scrub import scrub
from loadgen.target import EventKind, PreparedRequest, StreamEvent
from loadgen.targets.apis import is_chat
from loadgen.targets.openai import OpenAITarget
from loadgen.targets.openai_stream import body_summary

OPENAI_APIS = ("openai-chat", "openai-completions")
# A probe request asks for at most CAP tokens: its deadline is the spec's, but no longer than
# this (as for preflight), so a server that accepts and never answers stops the probe in time.
PROBE_DEADLINE_S = 60.0
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


class Silent(PreflightError):
    """The target answered none of the probe's requests (timeouts, no connection)."""


class Prober:
    """Runs the checks against one target; `extra` holds the spec's own values to send."""

    def __init__(self, target: OpenAITarget, extra: dict[str, Any] | None = None) -> None:
        self.target = target
        self.spec: TargetSpec = target.spec
        self.chat = is_chat(self.spec.api)
        self.extra = extra or {}
        self.cap_field = self.spec.max_tokens_field if self.chat else "max_tokens"
        self.answered = False  # has any request got an answer (a status line) yet?

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
        s = self.spec  # the spec's own timeouts: connect, first byte (idle), whole answer
        limits = httpx.Timeout(s.idle_timeout_s, connect=s.connect_timeout_s)
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=limits) as client:
                r = await asyncio.wait_for(
                    client.post(url, json=body, headers=headers), probe_deadline_s(s)
                )
        except (httpx.HTTPError, TimeoutError) as e:
            self._silent(no_answer(e, s))
            return _Answer(0, None, no_answer(e, s))
        self.answered = True
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
            deadline_s=probe_deadline_s(self.spec),
            idle_timeout_s=self.spec.idle_timeout_s,
        )
        events: list[StreamEvent] = []
        try:
            async for ev in self.target.stream(req, time.perf_counter_ns):
                events.append(ev)
        except PeakloadError as e:
            heard = any(ev.kind not in (EventKind.SENT, EventKind.RESENT) for ev in events)
            self.answered = self.answered or heard or isinstance(e, HttpStatusError)
            if isinstance(e, PhaseTimeout) and not heard:
                self._silent(timeout_cause(e, self.spec))
            return events, e
        self.answered = True
        return events, None

    def _silent(self, why: str) -> None:
        """A request got no answer at all: if none has yet, the target is not answering, and
        every further check would wait out the same timeout."""
        if not self.answered:
            url = self.target.display_url
            raise Silent(f"{url} gave no answer to the probe ({why}): is the server up, and "
                         "is target.base_url right?")  # fmt: skip


def no_answer(e: BaseException, s: TargetSpec) -> str:
    """Why a whole-answer request got nothing, naming the spec's timeout that ran out."""
    if isinstance(e, httpx.ConnectTimeout):
        return f"no connection within target.connect_timeout_s ({s.connect_timeout_s:g} s)"
    if isinstance(e, httpx.ConnectError):
        return f"cannot connect ({scrub(str(e)) or type(e).__name__})"
    if isinstance(e, httpx.ReadTimeout):
        return f"connected, but no answer within target.idle_timeout_s ({s.idle_timeout_s:g} s)"
    if isinstance(e, TimeoutError):
        return f"no whole answer within target.deadline_s ({probe_deadline_s(s):g} s)"
    return f"no answer ({type(e).__name__})"


def probe_deadline_s(s: TargetSpec) -> float:
    return min(s.deadline_s, PROBE_DEADLINE_S)


def timeout_cause(e: PhaseTimeout, s: TargetSpec) -> str:
    """A stream's timeout before any answer, named by the spec's field that ran out."""
    if e.phase == "connect":
        return f"no connection within target.connect_timeout_s ({s.connect_timeout_s:g} s)"
    if e.phase in ("headers", "deadline"):
        return f"connected, but no response within target.deadline_s ({probe_deadline_s(s):g} s)"
    return f"connected, but nothing within target.idle_timeout_s ({s.idle_timeout_s:g} s)"


def failed_verdict(name: str, a: _Answer) -> Verdict | None:
    """The verdict of an answer that was not a 2xx JSON object, or None."""
    if a.obj is not None:
        return None
    if a.status in (400, 404, 409, 415, 422) or (400 <= a.status < 500 and a.status != 429):
        return Verdict(name, REJECTED, a.error)
    return Verdict(name, INCONCLUSIVE, a.error)


def first_choice(obj: dict[str, Any]) -> dict[str, Any]:
    choices = obj.get("choices") or [{}]
    c = choices[0]
    return c if isinstance(c, dict) else {}


def answer_text(obj: dict[str, Any]) -> str:
    c = first_choice(obj)
    msg = c.get("message")
    if isinstance(msg, dict):
        return str(msg.get("content") or "")
    return str(c.get("text") or "")


def completion_tokens(obj: dict[str, Any]) -> int | None:
    u = obj.get("usage")
    v = u.get("completion_tokens") if isinstance(u, dict) else None
    return v if type(v) is int else None


def stream_failure(name: str, exc: Exception) -> Verdict:
    if isinstance(exc, HttpStatusError):
        if exc.status != 429 and 400 <= exc.status < 500:
            return Verdict(name, REJECTED, exc.detail or str(exc))
        return Verdict(name, INCONCLUSIVE, str(exc))
    if isinstance(exc, StreamProtocolError) and "ignored stream=true" in str(exc):
        return Verdict(name, IGNORED, "a JSON answer came back, not a stream")
    return Verdict(name, INCONCLUSIVE, str(exc))
