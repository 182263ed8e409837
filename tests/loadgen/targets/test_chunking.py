"""M5 — odd chunking: several tokens per event, events split mid-UTF-8 and mid-line, many events
per read, role-only, empty and usage-only chunks, reasoning deltas, CRLF, multi-line data,
Content-Length bodies: the same text and counts every way, over both transports."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import Callable, Iterable

import pytest

from loadgen.target import EventKind, StreamEvent
from tests.loadgen.targets.helpers import (
    LOOPS,
    TRANSPORTS,
    collect,
    count,
    make_target,
    request,
    run_on,
    text_of,
)
from tests.loadgen.targets.scripted import (
    END,
    Received,
    ScriptedServer,
    Sleep,
    Step,
    chat_delta,
    chunk,
    head,
    split_wire,
    sse,
    usage_chunk,
)

PAYLOADS: list[object] = [
    chat_delta(role="assistant"),
    chat_delta(reasoning_content="Let me "),
    chat_delta(reasoning="think."),
    chat_delta(content="Hello wor"),
    chat_delta(content="ld, héllo 🌍 世界"),
    chat_delta(content=""),
    {"id": "x", "choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]},
    usage_chunk(5, 12, reasoning=4),
    "[DONE]",
]
EVENTS = [sse(p) for p in PAYLOADS]
BODY = b"".join(EVENTS)
WIRE = head() + chunk(BODY) + END


def multibyte_cuts(data: bytes) -> list[int]:
    """Offsets that fall inside each multi-byte UTF-8 character of `data`."""
    return [i for i, b in enumerate(data) if 0x80 <= b < 0xC0]  # continuation bytes


def one_event_per_write(_: Received) -> Iterable[Step]:
    yield head()
    for ev in EVENTS:
        yield Sleep(0.003)
        yield chunk(ev)
    yield END


def everything_in_one_write(_: Received) -> Iterable[Step]:
    yield WIRE


def one_chunk_per_event_one_write(_: Received) -> Iterable[Step]:
    yield head() + b"".join(chunk(ev) for ev in EVENTS) + END


def cut_inside_utf8(_: Received) -> Iterable[Step]:
    yield from split_wire(WIRE, multibyte_cuts(WIRE), gap_s=0.003)


def http_chunks_cut_inside_utf8(_: Received) -> Iterable[Step]:
    bounds = [0, *multibyte_cuts(BODY), len(BODY)]
    yield head()
    for a, b in itertools.pairwise(bounds):
        yield Sleep(0.002)
        yield chunk(BODY[a:b])
    yield END


def every_seven_bytes(_: Received) -> Iterable[Step]:
    yield from split_wire(WIRE, range(7, len(WIRE), 7), gap_s=0.001)


def random_cuts(_: Received) -> Iterable[Step]:
    rng = random.Random(7)
    yield from split_wire(WIRE, rng.sample(range(1, len(WIRE)), 25), gap_s=0.002)


def crlf_lines(_: Received) -> Iterable[Step]:
    body = BODY.replace(b"\n", b"\r\n")
    yield head() + chunk(body[:50])
    yield Sleep(0.003)
    yield chunk(body[50:]) + END


def multiline_data_and_comments(_: Received) -> Iterable[Step]:
    parts = [b": ping\n\n"]
    for p in PAYLOADS:
        text = p if isinstance(p, str) else json.dumps(p, ensure_ascii=False, indent=1)
        parts.append(b"".join(b"data: " + line.encode() + b"\n" for line in text.split("\n")))
        parts.append(b"\n")
    body = b"".join(parts)
    yield from split_wire(head() + chunk(body) + END, [len(head()) + 20, len(head()) + 90], 0.002)


def content_length_body(_: Received) -> Iterable[Step]:
    yield head(chunked=False, length=len(BODY)) + BODY[:33]
    yield Sleep(0.003)
    yield BODY[33:]


def until_close_body(_: Received) -> Iterable[Step]:
    from tests.loadgen.targets.scripted import Close

    yield head(chunked=False) + BODY
    yield Close()


def interim_100_continue(_: Received) -> Iterable[Step]:
    yield b"HTTP/1.1 100 Continue\r\n\r\n" + WIRE[:20]
    yield Sleep(0.003)
    yield WIRE[20:]


def interim_and_final_in_one_write(_: Received) -> Iterable[Step]:
    yield b"HTTP/1.1 100 Continue\r\n\r\n" + WIRE


WAYS: dict[str, Callable[[Received], Iterable[Step]]] = {
    "interim_100_continue": interim_100_continue,
    "interim_and_final_in_one_write": interim_and_final_in_one_write,
    "one_event_per_write": one_event_per_write,
    "everything_in_one_write": everything_in_one_write,
    "one_chunk_per_event_one_write": one_chunk_per_event_one_write,
    "cut_inside_utf8": cut_inside_utf8,
    "http_chunks_cut_inside_utf8": http_chunks_cut_inside_utf8,
    "every_seven_bytes": every_seven_bytes,
    "random_cuts": random_cuts,
    "crlf_lines": crlf_lines,
    "multiline_data_and_comments": multiline_data_and_comments,
    "content_length_body": content_length_body,
    "until_close_body": until_close_body,
}


def check_semantics(events: list[StreamEvent]) -> None:
    kinds = [e.kind for e in events]
    assert kinds[:2] == [EventKind.SENT, EventKind.HEADERS]
    assert kinds[-1] == EventKind.DONE and kinds.count(EventKind.DONE) == 1
    assert text_of(events, EventKind.CONTENT) == "Hello world, héllo 🌍 世界!"
    assert text_of(events, EventKind.REASONING) == "Let me think."
    assert count(events, EventKind.CONTENT) == 3
    assert count(events, EventKind.REASONING) == 2
    assert all(e.tokens == 1 for e in events if e.kind in (EventKind.CONTENT, EventKind.REASONING))
    usage = [e.usage for e in events if e.kind == EventKind.USAGE]
    assert len(usage) == 1 and usage[0] is not None
    assert (usage[0].prompt_tokens, usage[0].completion_tokens, usage[0].reasoning_tokens) == (
        5,
        12,
        4,
    )
    stamps = [e.t_ns for e in events]
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_same_text_and_counts_every_way(transport: str, loop: str) -> None:
    async def main() -> None:
        for name, script in WAYS.items():
            async with ScriptedServer(script) as srv:
                target = make_target(srv.base_url, transport)
                try:
                    events, exc = await collect(target, request())
                finally:
                    await target.aclose()
            assert exc is None, (name, exc)
            try:
                check_semantics(events)
            except AssertionError as e:
                raise AssertionError(f"{transport}/{loop}/{name}: {e}") from e

    run_on(loop, main())


def test_raw_stamps_once_per_read_before_parsing() -> None:
    """A counting clock: the raw transport reads it once per network read, so everything that
    arrived in one read shares one stamp, and separate reads get separate stamps."""

    async def main() -> None:
        calls = itertools.count(1)

        def clock() -> int:
            return next(calls)

        async with ScriptedServer(everything_in_one_write) as srv:
            target = make_target(srv.base_url, "raw")
            events, exc = await collect(target, request(), clock)
            assert exc is None
            body_stamps = {e.t_ns for e in events[1:]}
            assert len(body_stamps) == 1  # head and all events: one read
            assert events[0].t_ns < events[1].t_ns
            await target.aclose()
        async with ScriptedServer(one_event_per_write) as srv:
            target = make_target(srv.base_url, "raw")
            events, exc = await collect(target, request(), clock)
            assert exc is None
            output = [e for e in events if e.kind in (EventKind.CONTENT, EventKind.REASONING)]
            assert len({e.t_ns for e in output}) == len(output)  # one read each
            await target.aclose()

    asyncio.run(main())
