"""What the simulated engine says: the token rule for prompts (one whitespace-separated word = one
token), the deterministic pseudo-word output (one word = one token, some multi-byte UTF-8), and
the OpenAI-style SSE events and JSON bodies, pre-encoded so the hot path only concatenates bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from typing import Any

_WORDS = (  # noqa: SIM905 - a sentence reads better than 51 quoted words
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar "
    "papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu load peak token stream "
    "batch queue engine latency window signal vector matrix kernel tensor cache "
    "é 日本 🚀 naïve café über Ωmega 中文 😀 straße"
).split()
VOCAB_SIZE = len(_WORDS)  # 51: prime, so any stride walks every word
_STRIDE = 7
FIRST: tuple[bytes, ...] = tuple(w.encode() for w in _WORDS)
SPACED: tuple[bytes, ...] = tuple((" " + w).encode() for w in _WORDS)


class BadRequest(Exception):
    """The request body is unusable; `str(e)` is the message returned with HTTP 400."""


def word_offset(seed: int, request_id: str) -> int:
    """Where in the vocabulary this request's output starts (deterministic per seed and id)."""
    digest = hashlib.blake2b(f"{seed}/{request_id}/text".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % VOCAB_SIZE


def token_bytes(offset: int, index: int, spaced: bool) -> bytes:
    """UTF-8 text of output token `index` (0-based): a word, space-prefixed unless it opens a
    part (the answer, or the reasoning)."""
    i = (offset + index * _STRIDE) % VOCAB_SIZE
    return SPACED[i] if spaced else FIRST[i]


def output_text(offset: int, start: int, stop: int) -> str:
    """Text of output tokens start..stop-1, the first unspaced."""
    return b"".join(token_bytes(offset, i, i > start) for i in range(start, stop)).decode()


def count_words(text: Any, where: str) -> int:
    if not isinstance(text, str):
        raise BadRequest(f"{where} must be a string")
    return len(text.split())


def chat_prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens of a chat request: words of every message's text content (no template)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    total = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise BadRequest(f"messages[{i}] must be an object")
        content = msg.get("content")
        if content is None:
            continue
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "text":
                    total += count_words(part.get("text"), f"messages[{i}].content[{j}].text")
        else:
            total += count_words(content, f"messages[{i}].content")
    return total


def completion_prompt_tokens(body: dict[str, Any]) -> int:
    """Prompt tokens of a completions request: words of a string, or token ids given as ints."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(len(p.split()) for p in prompt)
        if all(isinstance(p, int) for p in prompt):
            return len(prompt)
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return sum(len(p) for p in prompt)
    raise BadRequest("'prompt' must be a string, a list of strings, or token ids")


_ROLE_CHOICES = (
    '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
    '"logprobs":null,"finish_reason":null}]}'
)


@functools.lru_cache(maxsize=16)
def _quoted(s: str) -> str:
    return json.dumps(s)


SSE_TYPE = "text/event-stream; charset=utf-8"


class EventFormat:
    """Pre-encoded pieces of one response's SSE events (chat or text completion). The other
    APIs' formats (loadgen.sim.protocols) offer the same methods."""

    stream_type = SSE_TYPE
    plain = True  # one token = `content_pre + word + content_post` (the stream's hot path)
    reports_timings = False  # timings at the end even without `report_timings`

    def __init__(self, chat: bool, request_id: str, model: str, reasoning_field: str) -> None:
        self.chat = chat
        created = int(time.time())  # a label (seconds since epoch), never used for a duration
        rid = json.dumps(("chatcmpl-" if chat else "cmpl-") + request_id)
        obj = "chat.completion.chunk" if chat else "text_completion"
        mod = _quoted(model)
        self.head = f'{{"id":{rid},"object":"{obj}","created":{created},"model":{mod},'
        self.request_id = request_id
        self.model = model
        if chat:
            pre = self.head + '"choices":[{"index":0,"delta":{'
            self.content_pre = ("data: " + pre + '"content":"').encode()
            self.reasoning_pre = ("data: " + pre + f'"{reasoning_field}":"').encode()
            tool = '"tool_calls":[{"index":0,"function":{"arguments":"'
            self.tool_pre = ("data: " + pre + tool).encode()
            self.content_post = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            self.tool_post = b'"}}]},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            pre = self.head + '"choices":[{"index":0,"text":"'
            self.content_pre = self.reasoning_pre = self.tool_pre = ("data: " + pre).encode()
            self.content_post = self.tool_post = b'","logprobs":null,"finish_reason":null}]}\n\n'

    def role_event(self) -> bytes:
        return self._event(_ROLE_CHOICES)

    def tool_open_event(self, name: str = "get_weather") -> bytes:
        fn = {"name": name, "arguments": ""}
        call = {"index": 0, "id": "call_" + self.request_id, "type": "function", "function": fn}
        return self._choice({"delta": {"tool_calls": [call]}})

    def content_event(self, text: bytes, kind: str) -> bytes:
        if kind == "reasoning":
            return self.reasoning_pre + text + self.content_post
        if kind == "tool":
            return self.tool_pre + text + self.tool_post
        return self.content_pre + text + self.content_post

    def finish_event(self, reason: str) -> bytes:
        if self.chat:
            return self._choice({"delta": {}}, reason)
        return self._choice({"text": ""}, reason)

    def usage_event(self, prompt: int, completion: int, reasoning: int | None) -> bytes:
        u = json.dumps(usage(prompt, completion, reasoning))
        return self._event(f'"choices":[],"usage":{u}}}')

    def timings_event(self, timings: dict[str, Any]) -> bytes:
        """llama.cpp's closing `timings` object, in a chunk of its own; Groq's `x_groq.usage`
        when the times are Groq's (provider_times: `queue_time` ...)."""
        if "queue_time" in timings:
            return self._event(f'"choices":[],"x_groq":{{"usage":{json.dumps(timings)}}}}}')
        return self._event(f'"choices":[],"timings":{json.dumps(timings)}}}')

    def tail(
        self,
        reason: str,
        prompt: int,
        generated: int,
        reasoning: int | None,
        include_usage: bool,
        timings: dict[str, Any] | None,
        done: bool,
        full_text: str,
    ) -> bytes:
        """Everything after the last token: finish, usage, timings, the end marker."""
        out = self.finish_event(reason)
        if include_usage:
            out += self.usage_event(prompt, generated, reasoning)
        if timings is not None:
            out += self.timings_event(timings)
        return out + DONE_EVENT if done else out

    def done_event(self) -> bytes:
        return DONE_EVENT

    def error(self, message: str) -> bytes:
        return error_event(message)

    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes:
        """A whole non-streaming response."""
        return completion_body(
            self.chat,
            self.request_id,
            self.model,
            text_out,
            reasoning,
            reasoning_field,
            prompt,
            completion,
            "length",
        )

    def body_headers(self, prompt: int, completion: int, elapsed_ms: float) -> dict[str, str]:
        return {}

    def _choice(self, fields: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, **fields, "logprobs": None, "finish_reason": finish_reason}
        return self._event(f'"choices":[{json.dumps(choice, separators=(",", ":"))}]}}')

    def _event(self, rest: str) -> bytes:
        return ("data: " + self.head + rest + "\n\n").encode()


def usage(prompt: int, completion: int, reasoning: int | None) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reasoning is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return u


def llamacpp_timings(
    prompt_tokens: int,
    arrived_ns: int,
    admitted_ns: int,
    first_ns: int,
    last_ns: int,
    generated: int,
) -> dict[str, Any]:
    """Timings as llama.cpp's server reports them: prompt evaluation from admission into a slot
    (`admitted_ns`; the arrival when unknown, < 0) to the first token, generation from the
    first token to the last over `predicted_n` tokens (ms). The wait for a slot is not in it:
    llama.cpp reports none."""
    start = admitted_ns if admitted_ns >= 0 else arrived_ns
    prompt_ms = max(first_ns - start, 0) / 1e6
    predicted_ms = max(last_ns - first_ns, 0) / 1e6
    return {
        "cache_n": 0,
        "prompt_n": prompt_tokens,
        "prompt_ms": round(prompt_ms, 3),
        "prompt_per_token_ms": round(prompt_ms / prompt_tokens, 3) if prompt_tokens else 0.0,
        "predicted_n": generated,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / generated, 3) if generated else 0.0,
    }


def provider_times(
    prompt_tokens: int,
    arrived_ns: int,
    admitted_ns: int,
    first_ns: int,
    last_ns: int,
    generated: int,
) -> dict[str, Any]:
    """Times as Groq reports them in `x_groq.usage` (seconds): queue_time from arrival to
    admission into a slot, prompt_time from admission to the first token, completion_time from
    the first token to the last, with the token counts."""
    admitted = admitted_ns if admitted_ns >= 0 else arrived_ns
    queue_s = max(admitted - arrived_ns, 0) / 1e9
    prompt_s = max(first_ns - admitted, 0) / 1e9
    completion_s = max(last_ns - first_ns, 0) / 1e9
    return {
        "queue_time": round(queue_s, 6),
        "prompt_tokens": prompt_tokens,
        "prompt_time": round(prompt_s, 6),
        "completion_tokens": generated,
        "completion_time": round(completion_s, 6),
        "total_tokens": prompt_tokens + generated,
        "total_time": round(prompt_s + completion_s, 6),
    }


DONE_EVENT = b"data: [DONE]\n\n"


def error_event(message: str, code: int = 500) -> bytes:
    err = {"error": {"message": message, "type": "InternalServerError", "code": code}}
    return ("data: " + json.dumps(err) + "\n\n").encode()


def completion_body(
    chat: bool,
    request_id: str,
    model: str,
    text: str,
    reasoning: str | None,
    reasoning_field: str,
    prompt: int,
    completion: int,
    finish_reason: str,
) -> bytes:
    """A whole non-streaming response (chat.completion or text_completion) with usage."""
    created = int(time.time())
    choice: dict[str, Any]
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning is not None:
            message[reasoning_field] = reasoning
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    body = {
        "id": ("chatcmpl-" if chat else "cmpl-") + request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(prompt, completion, None if reasoning is None else len(reasoning.split())),
    }
    return json.dumps(body, ensure_ascii=False).encode()


_CHOICE0 = b'"choices":[{"index":0,'  # an OpenAI delta's choice, as EventFormat writes it


def stream_choices(n: object, api: str, streaming: bool) -> int:
    """How many choices a stream carries: an honoured `n` > 1 on the OpenAI APIs, else 1."""
    openai = api in ("openai-chat", "openai-completions") and streaming
    return n if type(n) is int and n > 1 and openai else 1


def each_choice(event: bytes, choices: int) -> list[bytes]:
    """One step's event for every choice, interleaved (n > 1: the same text, each delta with its
    own choice index, as an engine decoding the n sequences in one batch writes them)."""
    return [event] + [
        event.replace(_CHOICE0, b'"choices":[{"index":%d,' % c, 1) for c in range(1, choices)
    ]
