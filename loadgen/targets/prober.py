"""The probe's client and its findings: `Prober` sends one small request (a whole JSON answer
through a plain HTTP client, or a stream through the target itself) and `Verdict`s say what the
target did with a parameter; helpers read the answers (loadgen.targets.probe_checks uses them).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from loadgen.errors import HttpStatusError, PeakloadError, StreamProtocolError
from loadgen.spec import TargetSpec
from loadgen.target import PreparedRequest, StreamEvent
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
