"""Every wire API end to end against the simulated engine (which speaks each, as documented):
the right path and body, every token counted and stamped in order, usage and the server's own
timings where the API reports them, DONE last; both transports, streaming and not."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from loadgen.target import EventKind, StreamEvent
from loadgen.targets import OpenAITarget
from loadgen.targets.apis import is_chat
from tests.loadgen.targets.helpers import TRANSPORTS, collect, make_target, request
from tests.support.sim import SimProcess, start_sim

APIS = [
    "openai-chat",
    "openai-completions",
    "openai-responses",
    "ollama-chat",
    "ollama-generate",
    "tgi-generate",
    "llamacpp-completion",
    "triton-generate",
]
ROOT_APIS = {"ollama-chat", "ollama-generate", "tgi-generate", "llamacpp-completion",
             "triton-generate"}  # fmt: skip
# what each API reports about usage and the server's own times
USAGE = {"openai-chat", "openai-completions", "openai-responses", "ollama-chat",
         "ollama-generate", "tgi-generate", "llamacpp-completion"}  # fmt: skip
SERVER_TIMINGS = {"ollama-chat", "ollama-generate", "llamacpp-completion"}
N = 7


@pytest.fixture(scope="module")
def sim() -> Any:
    with start_sim(["--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2"]) as sp:
        yield sp


def _target(sim: SimProcess, api: str, transport: str, **kw: Any) -> OpenAITarget:
    base = sim.base_url.removesuffix("/v1") if api in ROOT_APIS else sim.base_url
    return make_target(base, transport, api=api, **kw)


def _run(target: OpenAITarget, **body: Any) -> tuple[list[StreamEvent], BaseException | None]:
    async def main() -> tuple[list[StreamEvent], BaseException | None]:
        try:  # the workload's body: messages for chat APIs, else a prompt (loadgen.engine.workload)
            if is_chat(target.spec.api):
                body["messages"] = [{"role": "user", "content": "one two three"}]
            else:
                body["prompt"] = "one two three"
            return await collect(target, request(max_tokens=N, **body))
        finally:
            await target.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("api", APIS)
def test_streaming_api_end_to_end(sim: SimProcess, api: str, transport: str) -> None:
    events, exc = _run(_target(sim, api, transport))
    assert exc is None, repr(exc)
    kinds = [e.kind for e in events]
    assert kinds[:2] == [EventKind.SENT, EventKind.HEADERS] and kinds[-1] == EventKind.DONE
    content = [e for e in events if e.kind == EventKind.CONTENT]
    assert sum(e.tokens for e in content) == N  # one event per token, each stamped
    stamps = [e.t_ns for e in content]
    assert stamps == sorted(stamps) and stamps[0] >= events[1].t_ns
    assert len("".join(e.text for e in content).split()) == N
    usage = [e.usage for e in events if e.kind == EventKind.USAGE and e.usage is not None]
    if api in USAGE:
        assert usage and usage[-1].completion_tokens == N, api
        assert usage[-1].prompt_tokens == 3
    else:
        assert not usage
    if api in SERVER_TIMINGS:
        server = usage[-1].server
        assert server is not None and server.decode_tokens == N and server.prompt_tokens == 3
        assert server.decode_ms is not None and server.decode_ms >= 0


@pytest.mark.parametrize("api", APIS)
def test_non_streaming_api_end_to_end(sim: SimProcess, api: str) -> None:
    events, exc = _run(_target(sim, api, "raw", stream=False))
    assert exc is None, repr(exc)
    kinds = [e.kind for e in events]
    assert kinds[-1] == EventKind.DONE and EventKind.CONTENT in kinds
    text = "".join(e.text for e in events if e.kind == EventKind.CONTENT)
    assert len(text.split()) == N
    if api == "tgi-generate":  # /generate's x-*-time headers are the server's timings
        usage = [e.usage for e in events if e.kind == EventKind.USAGE]
        assert usage and usage[-1] is not None and usage[-1].server is not None
        assert usage[-1].server.decode_tokens == N and usage[-1].server.queue_ms == 0


def test_sim_protocol_option_serves_one_api_and_prints_its_root() -> None:
    with start_sim(["--preset", "fixed", "--protocol", "ollama"]) as sp:
        root = sp.base_url.removesuffix("/v1")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
        assert httpx.post(f"{root}/api/chat", json=body).status_code == 200
        assert httpx.post(f"{root}/v1/chat/completions", json=body).status_code == 404
        assert sp.proc.stdout is not None
        assert sp.proc.stdout.readline().decode().strip() == root


def test_n_choices_are_each_counted_and_indexed() -> None:
    """The decoder keeps every choice of an n > 1 stream (choice index on each event)."""
    from loadgen.targets.openai_stream import OpenAIStreamDecoder

    dec, out = OpenAIStreamDecoder(), []
    for i, text in enumerate(["a", "b", " c", " d"]):
        payload = b'{"choices":[{"index":%d,"delta":{"content":"%s"}}]}' % (i % 2, text.encode())
        dec.decode(payload, 100 + i, out)
    both = (
        b'{"choices":[{"index":0,"delta":{"content":" e"}},{"index":1,"delta":{"content":" f"}}]}'
    )
    dec.decode(both, 200, out)
    assert [(e.choice, e.text, e.t_ns) for e in out] == [
        (0, "a", 100), (1, "b", 101), (0, " c", 102), (1, " d", 103), (0, " e", 200),
        (1, " f", 200),
    ]  # fmt: skip
