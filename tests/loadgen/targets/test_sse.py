"""SSE parser, chunked decoder and OpenAI payload decoding, with every way of splitting."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from loadgen.errors import InBandError, StreamProtocolError
from loadgen.target import EventKind, StreamEvent
from loadgen.targets.openai_stream import OpenAIStreamDecoder, body_summary, decode_body
from loadgen.targets.rawhttp import _Chunked
from loadgen.targets.sse import SSEParser

SAMPLE = (
    ": keep-alive comment\n\n"
    'data: {"t": "héllo 🌍"}\n\n'
    "event: message\nid: 7\n"
    'data: {"t":\ndata: "two lines"}\n\n'
    "data:no-space\n\n"
    "retry: 100\n\n"
    "data\n\n"
    "data: [DONE]\n\n"
).encode()
EXPECTED = [
    b'{"t": "h\xc3\xa9llo \xf0\x9f\x8c\x8d"}',
    b'{"t":\n"two lines"}',
    b"no-space",
    b"",
    b"[DONE]",
]


def feed_all(parser: SSEParser, pieces: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for p in pieces:
        out.extend(parser.feed(p))
    tail, leftover = parser.finish()
    assert not leftover
    return out + tail


def pieces_at(data: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_every_two_way_split_gives_the_same_payloads(eol: str) -> None:
    data = SAMPLE.replace(b"\n", eol.encode())
    assert feed_all(SSEParser(), [data]) == EXPECTED
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1, 7):  # every first cut, a stride of second cuts
            assert feed_all(SSEParser(), pieces_at(data, (i, j))) == EXPECTED, (i, j)


def test_random_many_way_splits_and_byte_at_a_time() -> None:
    rng = random.Random(1234)
    for eol in (b"\n", b"\r\n"):
        data = SAMPLE.replace(b"\n", eol)
        assert feed_all(SSEParser(), [bytes([b]) for b in data]) == EXPECTED
        for _ in range(300):
            cuts = tuple(rng.sample(range(1, len(data)), rng.randint(1, 20)))
            assert feed_all(SSEParser(), pieces_at(data, cuts)) == EXPECTED


def test_incomplete_final_event_is_reported_at_eof() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"a": 1}\n\ndata: {"b"') == [b'{"a": 1}']
    assert p.finish() == ([], True)
    p2 = SSEParser()
    assert p2.feed(b"data: x\n\n\n") == [b"x"]
    assert p2.finish() == ([], False)
    p3 = SSEParser()
    assert p3.feed(b"data: x\r\r") == []  # the last CR might start a CRLF
    assert p3.finish() == ([b"x"], False)


def test_an_unterminated_giant_event_is_an_error() -> None:
    p = SSEParser()
    with pytest.raises(StreamProtocolError, match="larger than"):
        for _ in range(20):
            p.feed(b"data: " + b"x" * (1 << 20))


def chunked_wire(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\nx-t: 1\r\n\r\n"


def test_chunked_decoder_every_split() -> None:
    body = [b"data: a\n\n", b"\xc3", b"\xa9" * 40, b"z"]
    wire = chunked_wire(body)
    for i in range(len(wire) + 1):
        for j in range(i, len(wire) + 1, 5):
            dec = _Chunked()
            out, done = b"", False
            for piece in pieces_at(wire, (i, j)):
                assert not (done and piece)
                if piece:
                    got, done = dec.feed(piece)
                    out += got
            assert done and out == b"".join(body), (i, j)


@pytest.mark.parametrize("bad", [b"zz\r\n", b"3\r\nabcX\r\n", b"-1\r\n"])
def test_chunked_decoder_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(StreamProtocolError, match="chunked"):
        _Chunked().feed(bad)


def decode(payloads: list[dict[str, object] | str]) -> list[StreamEvent]:
    dec = OpenAIStreamDecoder()
    out: list[StreamEvent] = []
    for i, p in enumerate(payloads):
        dec.decode(p.encode() if isinstance(p, str) else json.dumps(p).encode(), i, out)
    return out


def test_decoder_kinds_and_counts() -> None:
    evs = decode(
        [
            {"choices": [{"delta": {"role": "assistant"}}]},
            {"choices": [{"delta": {"content": ""}}]},
            {"choices": [{"delta": {"reasoning_content": "think"}}]},
            {"choices": [{"delta": {"reasoning": " more"}}]},
            {"choices": [{"delta": {"content": "Hello wor"}}]},
            {
                "choices": [
                    {"delta": {"tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}}
                ]
            },
            {"choices": [{"text": "completion"}]},
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 5,
                    "completion_tokens": 9,
                    "completion_tokens_details": {"reasoning_tokens": 2},
                },
            },
            "[DONE]",
            {"choices": [{"delta": {"content": "after done is ignored"}}]},
        ]
    )
    kinds = [e.kind for e in evs]
    assert kinds == [
        EventKind.REASONING,
        EventKind.REASONING,
        EventKind.CONTENT,
        EventKind.TOOL_CALL,
        EventKind.CONTENT,
        EventKind.USAGE,
        EventKind.DONE,
    ]
    assert [e.tokens for e in evs[:5]] == [1, 1, 1, 1, 1]
    assert evs[2].text == "Hello wor" and evs[3].text == "f{}"
    usage = evs[5].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens) == (5, 9, 2)
    assert [e.t_ns for e in evs] == [2, 3, 4, 5, 6, 7, 8]


def test_decoder_errors() -> None:
    with pytest.raises(InBandError, match="overloaded") as ei:
        decode([{"choices": [{"delta": {"content": "a"}}]}, {"error": {"message": "overloaded"}}])
    assert ei.value.t_ns == 1
    with pytest.raises(InBandError, match="bad thing"):
        decode([{"object": "error", "message": "bad thing"}])
    with pytest.raises(StreamProtocolError, match="not JSON"):
        decode(["{not json"])
    with pytest.raises(StreamProtocolError, match="not JSON"):
        decode(['{"choices": []} {"x": 1}'])
    with pytest.raises(StreamProtocolError, match="not JSON"):
        OpenAIStreamDecoder().decode(b'{"a": "\xff"}', 0, [])
    padded = decode([' \t{"choices": [{"delta": {"content": "ok"}}]} \n'])
    assert [e.text for e in padded] == ["ok"]
    with pytest.raises(StreamProtocolError, match="not a string"):
        decode([{"choices": [{"delta": {"content": 5}}]}])
    with pytest.raises(StreamProtocolError, match="unexpected shape"):
        decode([{"choices": ["x"]}])


def test_decode_body_and_summaries() -> None:
    body = {
        "choices": [
            {"message": {"role": "assistant", "content": "whole", "reasoning_content": "r"}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    }
    evs = decode_body(json.dumps(body).encode(), 42)
    assert [e.kind for e in evs] == [
        EventKind.REASONING,
        EventKind.CONTENT,
        EventKind.USAGE,
        EventKind.DONE,
    ]
    assert evs[1].text == "whole" and all(e.t_ns == 42 for e in evs)
    with pytest.raises(StreamProtocolError, match="no choices"):
        decode_body(b"{}", 0)
    html = b"<html><head><title>502 Bad\n Gateway</title></head><body>x</body></html>"
    assert body_summary(html, "text/html") == "HTML page: 502 Bad Gateway"
    assert body_summary(b'{"error": {"message": "slow down"}}', "application/json") == "slow down"
    assert len(body_summary(b"x" * 5000, "text/plain")) == 200
