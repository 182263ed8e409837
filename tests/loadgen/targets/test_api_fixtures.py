"""Each preset's stream format, written from its provider's documented examples (no live calls),
decoded by the preset's API through its framing, split at every byte boundary: the text, the
token events, usage and the server's own timings come out the same however the bytes arrive."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from loadgen.runspec.presets import load_preset
from loadgen.runspec.target_spec import TargetSpec
from loadgen.target import EventKind, PreparedRequest, StreamEvent
from loadgen.targets.apis import api_for
from loadgen.targets.framing import NDJSONParser
from loadgen.targets.sse import SSEParser


def sse(*objs: Any, space: bool = True, done: bool = True) -> bytes:
    sep = b"data: " if space else b"data:"
    out = b"".join(sep + json.dumps(o).encode() + b"\n\n" for o in objs)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chat(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
            "finish_reason": None}], **extra}  # fmt: skip


OPENAI_USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
FIXTURES: dict[str, bytes] = {
    # vLLM / SGLang / TensorRT-LLM: reasoning_content deltas, usage chunk with empty choices
    "vllm": sse(chat({"role": "assistant"}), chat({"reasoning_content": "think"}),
                chat({"content": "Hel"}), chat({"content": "lo"}), chat({"content": "!"}),
                {"id": "x", "choices": [], "usage": OPENAI_USAGE}),
    "sglang": sse(chat({"reasoning_content": "think"}), chat({"content": "Hel"}),
                  chat({"content": "lo"}), chat({"content": "!"}),
                  {"id": "x", "choices": [], "usage": OPENAI_USAGE}),
    "tensorrt-llm": sse(chat({"content": "Hel"}), chat({"content": "lo"}),
                        chat({"content": "!"}), {"id": "x", "choices": [], "usage": OPENAI_USAGE}),
    "mlx": sse(chat({"content": "Hel"}), chat({"content": "lo"}), chat({"content": "!"}),
               {"id": "x", "choices": [], "usage": OPENAI_USAGE}),
    # llama-server's OpenAI endpoint: timings with the last chunk
    "llamacpp": sse(chat({"content": "Hel"}), chat({"content": "lo"}), chat({"content": "!"}),
                    {"id": "x", "choices": [], "usage": OPENAI_USAGE,
                     "timings": {"prompt_n": 12, "prompt_ms": 4.5, "predicted_n": 3,
                                 "predicted_ms": 9.0, "cache_n": 0}}),
    # Groq: usage and its times in x_groq on the last chunk
    "groq": sse(chat({"reasoning": "think"}), chat({"content": "Hel"}), chat({"content": "lo"}),
                chat({"content": "!"}),
                {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                 "x_groq": {"id": "req_1", "usage": {"queue_time": 0.012, "prompt_tokens": 12,
                            "prompt_time": 0.004, "completion_tokens": 3,
                            "completion_time": 0.009, "total_tokens": 15, "total_time": 0.013}}}),
    # Cerebras: usage plus time_info on the last chunk
    "cerebras": sse(chat({"content": "Hel"}), chat({"content": "lo"}), chat({"content": "!"}),
                    {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                     "usage": OPENAI_USAGE,
                     "time_info": {"queue_time": 0.001, "prompt_time": 0.002,
                                   "completion_time": 0.003, "total_time": 0.006}}),
    # Together / Fireworks: usage on the chunk that finishes
    "together": sse(chat({"content": "Hel"}), chat({"content": "lo"}),
                    {"id": "x", "choices": [{"index": 0, "delta": {"content": "!"},
                     "finish_reason": "stop"}], "usage": OPENAI_USAGE}),
    "fireworks": sse(chat({"content": "Hel"}), chat({"content": "lo"}),
                     chat({"content": "!"}),
                     {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                      "usage": OPENAI_USAGE}),
    "openai-compatible": sse(chat({"content": "Hel"}), chat({"content": "lo"}),
                             chat({"content": "!"}),
                             {"id": "x", "choices": [], "usage": OPENAI_USAGE}),
    # Ollama /api/chat: NDJSON, durations in ns on the done line
    "ollama": b"".join(json.dumps(o).encode() + b"\n" for o in [
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": "",
         "thinking": "think"}, "done": False},
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": "lo"}, "done": False},
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": "!"}, "done": False},
        {"model": "gpt-oss:20b", "message": {"role": "assistant", "content": ""}, "done": True,
         "done_reason": "stop", "total_duration": 20_000_000, "load_duration": 1_000_000,
         "prompt_eval_count": 12, "prompt_eval_duration": 4_500_000, "eval_count": 3,
         "eval_duration": 9_000_000}]),
    # TGI /generate_stream: `data:` without a space, the last event with generated_text
    "tgi": sse({"index": 1, "token": {"id": 1, "text": "Hel", "logprob": -0.1, "special": False},
                "generated_text": None, "details": None},
               {"index": 2, "token": {"id": 2, "text": "lo", "logprob": -0.1, "special": False},
                "generated_text": None, "details": None},
               {"index": 3, "token": {"id": 3, "text": "!", "logprob": -0.1, "special": False},
                "generated_text": "Hello!", "details": {"finish_reason": "eos_token",
                "generated_tokens": 3, "seed": None, "input_length": 12}},
               space=False, done=False),
    # Triton generate_stream: text_output deltas; the body's end ends the stream
    "triton": sse(*({"model_name": "ensemble", "model_version": "1", "sequence_end": False,
                     "sequence_id": 0, "text_output": t} for t in ("Hel", "lo", "!")),
                  done=False),
}  # fmt: skip
REASONING = {"vllm", "sglang", "groq", "ollama"}
USAGE_FROM_SERVER = set(FIXTURES) - {"triton"}
TIMINGS = {  # the server's own times: (queue_ms, prefill_ms, decode_ms)
    "llamacpp": (None, 4.5, 9.0),
    "groq": (12.0, 4.0, 9.0),
    "cerebras": (1.0, 2.0, 3.0),
    "ollama": (None, 4.5, 9.0),
}


def _decode(name: str, data: bytes, cuts: list[int]) -> list[StreamEvent]:
    api = api_for(load_preset(name).protocol)
    parser = SSEParser() if api.framing == "sse" else NDJSONParser()
    dec = api.decoder()
    out: list[StreamEvent] = []
    bounds = [0, *cuts, len(data)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        for payload in parser.feed(data[a:b]):
            dec.decode(payload, i, out)
    if not dec.done:
        tail, _ = parser.finish()
        for payload in tail:
            dec.decode(payload, len(bounds), out)
        dec.finish(len(bounds), out)
    assert dec.done, name
    return out


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_preset_stream_format_decodes_however_it_is_split(name: str) -> None:
    data = FIXTURES[name]
    whole = _decode(name, data, [])
    for cut in range(1, len(data)):  # every two-read split
        split = _decode(name, data, [cut])
        assert [(e.kind, e.text, e.tokens) for e in split] == [
            (e.kind, e.text, e.tokens) for e in whole
        ], (name, cut)
    content = [e for e in whole if e.kind == EventKind.CONTENT]
    assert "".join(e.text for e in content) == "Hello!" and len(content) == 3
    assert any(e.kind == EventKind.REASONING for e in whole) == (name in REASONING)
    assert whole[-1].kind == EventKind.DONE
    usage = [e.usage for e in whole if e.kind == EventKind.USAGE and e.usage is not None]
    if name in USAGE_FROM_SERVER:
        assert usage and usage[-1].completion_tokens == 3 and usage[-1].prompt_tokens == 12
    if name in TIMINGS:
        s = usage[-1].server
        assert s is not None and (s.queue_ms, s.prefill_ms, s.decode_ms) == pytest.approx(
            TIMINGS[name]
        )


def _encode(name: str, **body: Any) -> dict[str, Any]:
    p = load_preset(name)
    spec = TargetSpec(**{**p.target_defaults(), "base_url": "http://127.0.0.1:1", "model": "m"})
    req = PreparedRequest("r", {"messages": [{"role": "user", "content": "hi"}], **body})
    data, _ = api_for(p.protocol).encode(spec, req)
    out: dict[str, Any] = json.loads(data)
    return out


def test_request_bodies_follow_each_api() -> None:
    assert _encode("groq", max_tokens=5)["max_completion_tokens"] == 5  # by preset
    assert "max_tokens" not in _encode("cerebras", max_tokens=5)
    assert _encode("vllm", max_tokens=5)["max_tokens"] == 5
    ollama = _encode("ollama", max_tokens=5, seed=3, temperature=0.5)
    assert ollama["options"] == {"num_predict": 5, "seed": 3, "temperature": 0.5}
    assert ollama["messages"][0]["content"] == "hi" and ollama["stream"] is True
    tgi = _encode("tgi", max_tokens=5, seed=3)
    assert tgi["inputs"] == "hi" and tgi["parameters"]["max_new_tokens"] == 5
    assert tgi["parameters"]["details"] is True and tgi["parameters"]["seed"] == 3
    triton = _encode("triton", max_tokens=5)
    assert (triton["text_input"], triton["max_tokens"], triton["stream"]) == ("hi", 5, True)
