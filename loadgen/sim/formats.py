"""How the simulated engine writes each non-OpenAI API's stream and body (the OpenAI formats are
text.EventFormat): the Responses API's typed events, Ollama's NDJSON lines, TGI's token events,
llama.cpp's /completion events and Triton's text_output events, from their documented formats.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from loadgen.sim import text
from loadgen.sim.protocols import NDJSON_TYPE, is_chat


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _dumps(obj: Any) -> str:
    """Compact, as the real servers write JSON (Go's, Rust's serde, C++'s nlohmann)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Native:
    """What the native formats share: no OpenAI role/tool events, no [DONE], JSON bodies."""

    stream_type = text.SSE_TYPE
    plain = False
    reports_timings = False

    def __init__(self, chat: bool, request_id: str, model: str, reasoning_field: str) -> None:
        self.chat = chat
        self.request_id = request_id
        self.model = model
        self.content_pre = self.content_post = b""
        self.index = 0

    def role_event(self) -> bytes:
        return b""

    def tool_open_event(self, name: str = "get_weather") -> bytes:
        return b""

    def done_event(self) -> bytes:
        return b""

    def error(self, message: str) -> bytes:
        return b"data: " + _dumps({"error": message}).encode() + b"\n\n"

    def body_headers(self, prompt: int, completion: int, elapsed_ms: float) -> dict[str, str]:
        return {}


class ResponsesFormat(_Native):
    _KIND = {
        "content": "response.output_text.delta",
        "reasoning": "response.reasoning_text.delta",
        "tool": "response.function_call_arguments.delta",
    }

    def role_event(self) -> bytes:
        return self._event("response.created", {"response": {"id": "resp_" + self.request_id}})

    def content_event(self, chunk: bytes, kind: str) -> bytes:
        name = self._KIND.get(kind, self._KIND["content"])
        self.index += 1
        head = f'event: {name}\ndata: {{"type":"{name}","output_index":0,"content_index":0,'
        return head.encode() + b'"sequence_number":%d,"delta":"%s"}\n\n' % (self.index, chunk)

    def _usage(self, prompt: int, generated: int, reasoning: int | None) -> dict[str, Any]:
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": generated,
            "output_tokens_details": {"reasoning_tokens": reasoning or 0},
            "total_tokens": prompt + generated,
        }

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
        if not done:
            return b""
        status = "incomplete" if reason == "length" else "completed"
        resp: dict[str, Any] = {"id": "resp_" + self.request_id, "status": status}
        resp["model"] = self.model
        resp["usage"] = self._usage(prompt, generated, reasoning)
        name = "response.incomplete" if status == "incomplete" else "response.completed"
        return self._event(name, {"response": resp})

    def error(self, message: str) -> bytes:
        return self._event("error", {"code": "server_error", "message": message})

    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes:
        output: list[dict[str, Any]] = []
        if reasoning:
            output.append({"type": "reasoning", "content": [{"type": "reasoning_text",
                                                             "text": reasoning}]})  # fmt: skip
        output.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text_out}],
            }
        )
        nr = len(reasoning.split()) if reasoning else None
        obj = {"id": "resp_" + self.request_id, "object": "response", "status": "completed",
               "model": self.model, "output": output,
               "usage": self._usage(prompt, completion, nr)}  # fmt: skip
        return _dumps(obj).encode()

    def _event(self, name: str, fields: dict[str, Any]) -> bytes:
        self.index += 1
        obj = {"type": name, "sequence_number": self.index, **fields}
        return f"event: {name}\ndata: {_dumps(obj)}\n\n".encode()


class OllamaFormat(_Native):
    stream_type = NDJSON_TYPE
    reports_timings = True

    def __init__(self, chat: bool, request_id: str, model: str, reasoning_field: str) -> None:
        super().__init__(chat, request_id, model, reasoning_field)
        self.head = f'{{"model":{_q(model)},"created_at":"2026-01-01T00:00:00Z",'.encode()

    def content_event(self, chunk: bytes, kind: str) -> bytes:
        field = b"thinking" if kind == "reasoning" else b"content" if self.chat else b"response"
        if self.chat:
            return self.head + b'"message":{"role":"assistant","%s":"%s"},"done":false}\n' % (
                field,
                chunk,
            )
        return self.head + b'"%s":"%s","done":false}\n' % (field, chunk)

    def _final(self, prompt: int, generated: int, timings: dict[str, Any] | None) -> dict[str, Any]:
        t = timings or {}
        prompt_ns = int(float(t.get("prompt_ms", 0.0)) * 1e6)
        eval_ns = int(float(t.get("predicted_ms", 0.0)) * 1e6)
        return {"done": True, "done_reason": "length", "total_duration": prompt_ns + eval_ns,
                "load_duration": 0, "prompt_eval_count": prompt,
                "prompt_eval_duration": prompt_ns, "eval_count": generated,
                "eval_duration": eval_ns}  # fmt: skip

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
        if not done:
            return b""
        last: dict[str, Any] = {"message": {"role": "assistant", "content": ""}}
        if not self.chat:
            last = {"response": ""}
        final = {**last, **self._final(prompt, generated, timings)}
        return self.head + _dumps(final).encode()[1:] + b"\n"

    def error(self, message: str) -> bytes:
        return _dumps({"error": message}).encode() + b"\n"

    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes:
        obj: dict[str, Any] = {"model": self.model, "created_at": "2026-01-01T00:00:00Z"}
        if self.chat:
            msg: dict[str, Any] = {"role": "assistant", "content": text_out}
            if reasoning:
                msg["thinking"] = reasoning
            obj["message"] = msg
        else:
            obj["response"] = text_out
        obj.update(self._final(prompt, completion, timings))
        return _dumps(obj).encode()


class TGIFormat(_Native):
    def content_event(self, chunk: bytes, kind: str) -> bytes:
        self.index += 1
        return (
            b'data:{"index":%d,"token":{"id":%d,"text":"%s","logprob":-0.5,"special":false},'
            b'"generated_text":null,"details":null}\n\n' % (self.index, 1000 + self.index, chunk)
        )

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
        if not done:
            return b""
        self.index += 1
        details = (
            {
                "finish_reason": reason,
                "generated_tokens": generated,
                "seed": None,
                "input_length": prompt,
            }
            if include_usage
            else None
        )
        obj = {"index": self.index,
               "token": {"id": 2, "text": "", "logprob": 0.0, "special": True},
               "generated_text": full_text, "details": details}  # fmt: skip
        return b"data:" + _dumps(obj).encode() + b"\n\n"

    def error(self, message: str) -> bytes:
        obj = {"error": message, "error_type": "generation"}
        return b"data:" + _dumps(obj).encode() + b"\n\n"

    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes:
        details = {"finish_reason": "length", "generated_tokens": completion, "seed": None}
        obj = {"generated_text": text_out, "details": details}
        return _dumps(obj).encode()

    def body_headers(self, prompt: int, completion: int, elapsed_ms: float) -> dict[str, str]:
        per = elapsed_ms / completion if completion else 0.0
        return {
            "x-compute-type": "sim",
            "x-prompt-tokens": str(prompt),
            "x-generated-tokens": str(completion),
            "x-queue-time": "0",
            "x-inference-time": str(round(elapsed_ms)),
            "x-time-per-token": str(round(per)),
        }


class LlamaCppFormat(_Native):
    reports_timings = True

    def content_event(self, chunk: bytes, kind: str) -> bytes:
        return b'data: {"index":0,"content":"%s","stop":false,"id_slot":0}\n\n' % chunk

    def _final(
        self, prompt: int, generated: int, timings: dict[str, Any] | None, content: str
    ) -> dict[str, Any]:
        return {"index": 0, "content": content, "stop": True, "id_slot": 0,
                "stop_type": "limit", "model": self.model, "tokens_predicted": generated,
                "tokens_evaluated": prompt, "timings": timings or {}}  # fmt: skip

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
        if not done:
            return b""
        return b"data: " + _dumps(self._final(prompt, generated, timings, "")).encode() + (b"\n\n")

    def error(self, message: str) -> bytes:
        err = {"error": {"code": 500, "message": message, "type": "server_error"}}
        return b"data: " + _dumps(err).encode() + b"\n\n"

    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes:
        obj = self._final(prompt, completion, timings, text_out)
        return _dumps(obj).encode()


class TritonFormat(_Native):
    def __init__(self, chat: bool, request_id: str, model: str, reasoning_field: str) -> None:
        super().__init__(chat, request_id, model, reasoning_field)
        self.pre = f'data: {{"model_name":{_q(model)},"model_version":"1","text_output":"'
        self.pre_b = self.pre.encode()

    def content_event(self, chunk: bytes, kind: str) -> bytes:
        return self.pre_b + chunk + b'"}\n\n'

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
        return b""  # the stream's end is the body's end

    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes:
        obj = {"model_name": self.model, "model_version": "1", "text_output": text_out}
        return _dumps(obj).encode()


class Format(Protocol):
    stream_type: str
    plain: bool
    reports_timings: bool
    content_pre: bytes
    content_post: bytes

    def role_event(self) -> bytes: ...
    def tool_open_event(self, name: str = ...) -> bytes: ...
    def content_event(self, chunk: bytes, kind: str) -> bytes: ...
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
    ) -> bytes: ...
    def done_event(self) -> bytes: ...
    def error(self, message: str) -> bytes: ...
    def body(
        self,
        text_out: str,
        reasoning: str | None,
        reasoning_field: str,
        prompt: int,
        completion: int,
        timings: dict[str, Any] | None,
    ) -> bytes: ...
    def body_headers(self, prompt: int, completion: int, elapsed_ms: float) -> dict[str, str]: ...


def make_format(api: str, request_id: str, model: str, reasoning_field: str) -> Format:
    chat = is_chat(api)
    if api in ("openai-chat", "openai-completions"):
        return text.EventFormat(chat, request_id, model, reasoning_field)
    table: dict[str, Callable[[bool, str, str, str], Format]] = {
        "openai-responses": ResponsesFormat,
        "ollama-chat": OllamaFormat,
        "ollama-generate": OllamaFormat,
        "tgi-generate": TGIFormat,
        "llamacpp-completion": LlamaCppFormat,
        "triton-generate": TritonFormat,
    }
    return table[api](chat, request_id, model, reasoning_field)
