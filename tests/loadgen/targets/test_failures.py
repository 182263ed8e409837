"""M6 — failures mid-stream over both transports: each raises the right error, classified by
`classify`, after yielding every event that arrived before it (the runner keeps those tokens)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

import pytest

from loadgen.errors import (
    HttpStatusError,
    InBandError,
    PhaseTimeout,
    StreamProtocolError,
)
from loadgen.results.records import Outcome
from loadgen.target import EventKind
from loadgen.targets import classify
from loadgen.targets.http_common import ConnectFailed, StreamReset, StreamTruncated
from tests.loadgen.targets.helpers import (
    LOOPS,
    TRANSPORTS,
    collect,
    count,
    make_target,
    request,
    run_on,
)
from tests.loadgen.targets.scripted import (
    END,
    Close,
    Hang,
    Received,
    Reset,
    Script,
    ScriptedServer,
    Sleep,
    Step,
    chat_delta,
    chunk,
    head,
    sse,
)
from tests.support.ports import free_port

TOKENS = [chunk(sse(chat_delta(content=f"t{i} "))) for i in range(3)]


async def run_one(
    script: Script, transport: str, *, deadline_s: float = 10.0, idle_s: float = 5.0
) -> tuple[list[EventKind], BaseException | None, ScriptedServer]:
    async with ScriptedServer(script) as srv:
        target = make_target(srv.base_url, transport)
        try:
            events, exc = await collect(target, request(deadline_s=deadline_s, idle_s=idle_s))
        finally:
            await target.aclose()
    return [e.kind for e in events], exc, srv


def three_tokens_then(*tail: Step) -> Script:
    def script(_: Received) -> Iterable[Step]:
        yield head()
        for t in TOKENS:
            yield t
            yield Sleep(0.005)
        yield from tail

    return script


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_in_band_error_after_200(transport: str) -> None:
    script = three_tokens_then(chunk(sse({"error": {"message": "engine overloaded", "code": 503}})))
    kinds, exc, _ = asyncio.run(run_one(script, transport))
    assert isinstance(exc, InBandError)
    assert kinds.count(EventKind.CONTENT) == 3
    assert classify(exc) == (Outcome.STREAM_ERROR, "in_band", None, exc.detail)
    assert "engine overloaded" in exc.detail


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_reset_after_n_tokens(transport: str, loop: str) -> None:
    kinds, exc, _ = run_on(loop, run_one(three_tokens_then(Sleep(0.02), Reset()), transport))
    assert isinstance(exc, StreamReset), repr(exc)
    assert kinds.count(EventKind.CONTENT) == 3
    assert classify(exc)[:2] == (Outcome.STREAM_ERROR, "reset")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_close_mid_body_is_truncated(transport: str) -> None:
    kinds, exc, _ = asyncio.run(run_one(three_tokens_then(Close()), transport))
    assert isinstance(exc, StreamTruncated), repr(exc)
    assert kinds.count(EventKind.CONTENT) == 3
    assert classify(exc)[:2] == (Outcome.STREAM_ERROR, "truncated")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_no_done(transport: str) -> None:
    kinds, exc, _ = asyncio.run(run_one(three_tokens_then(END), transport))
    assert isinstance(exc, StreamTruncated)
    assert "without [DONE]" in str(exc)
    assert kinds.count(EventKind.CONTENT) == 3


def trickle(first_token: bool) -> Script:
    def script(_: Received) -> Iterable[Step]:
        yield head()
        if first_token:
            yield TOKENS[0]
        for b in b"data: {}\n\n":  # one byte a second: never a whole event
            yield Sleep(1.0)
            yield chunk(bytes([b]))

    return script


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_trickle_hits_idle_timeout(transport: str, loop: str) -> None:
    async def main() -> None:
        t0 = asyncio.get_running_loop().time()
        kinds, exc, _ = await run_one(trickle(True), transport, idle_s=0.3)
        elapsed = asyncio.get_running_loop().time() - t0
        assert isinstance(exc, PhaseTimeout) and exc.phase == "idle", repr(exc)
        assert kinds.count(EventKind.CONTENT) == 1
        assert classify(exc)[:2] == (Outcome.TIMEOUT, "idle")
        assert 0.28 <= elapsed < 0.95  # (uvloop time is ms-grained) before the next byte
        kinds, exc, _ = await run_one(trickle(False), transport, idle_s=0.3)
        assert isinstance(exc, PhaseTimeout) and exc.phase == "first_token", repr(exc)

    run_on(loop, main())


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_overall_deadline_while_streaming(transport: str, loop: str) -> None:
    def forever(_: Received) -> Iterable[Step]:
        yield head()
        for _ in range(100):
            yield TOKENS[0]
            yield Sleep(0.05)

    async def main() -> None:
        t0 = asyncio.get_running_loop().time()
        kinds, exc, _ = await run_one(forever, transport, deadline_s=0.5, idle_s=5.0)
        elapsed = asyncio.get_running_loop().time() - t0
        assert isinstance(exc, PhaseTimeout) and exc.phase == "deadline", repr(exc)
        assert 3 <= kinds.count(EventKind.CONTENT) <= 11
        assert 0.48 <= elapsed < 1.5

    run_on(loop, main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_deadline_before_headers(transport: str) -> None:
    def silent(_: Received) -> Iterable[Step]:
        yield Hang()

    kinds, exc, _ = asyncio.run(run_one(silent, transport, deadline_s=2.0))
    assert isinstance(exc, PhaseTimeout) and exc.phase == "headers", repr(exc)
    assert kinds == [EventKind.SENT] if transport == "raw" else kinds == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_429_with_retry_after(transport: str) -> None:
    body = b'{"error": {"message": "rate limited, slow down", "type": "rate_limit"}}'

    def script(_: Received) -> Iterable[Step]:
        yield head(
            429,
            {"retry-after": "7"},
            content_type="application/json",
            chunked=False,
            length=len(body),
        )
        yield body

    kinds, exc, _ = asyncio.run(run_one(script, transport))
    assert isinstance(exc, HttpStatusError)
    assert exc.status == 429 and exc.retry_after_s == 7.0
    assert "rate limited" in exc.detail
    assert kinds == [EventKind.SENT, EventKind.HEADERS]
    assert classify(exc)[:3] == (Outcome.HTTP_ERROR, None, 429)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_redirect_is_not_followed(transport: str) -> None:
    def script(_: Received) -> Iterable[Step]:
        yield head(
            302,
            {"location": "http://169.254.169.254/latest/meta-data/"},
            content_type=None,
            chunked=False,
            length=0,
        )

    _kinds, exc, srv = asyncio.run(run_one(script, transport))
    assert isinstance(exc, HttpStatusError) and exc.status == 302
    assert "redirect not followed" in exc.detail and "169.254" not in exc.detail
    assert len(srv.requests) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_html_instead_of_sse(transport: str) -> None:
    page = b"<html><head><title>Welcome to nginx!</title></head><body>hi</body></html>"

    def script(_: Received) -> Iterable[Step]:
        yield head(content_type="text/html; charset=utf-8", chunked=False, length=len(page))
        yield page

    _kinds, exc, _ = asyncio.run(run_one(script, transport))
    assert isinstance(exc, StreamProtocolError)
    assert "text/html" in exc.detail and "Welcome to nginx!" in exc.detail
    assert classify(exc)[:2] == (Outcome.STREAM_ERROR, "protocol")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_json_from_a_server_that_ignores_stream(transport: str) -> None:
    body = b'{"choices": [{"message": {"content": "whole answer"}}]}'

    def script(_: Received) -> Iterable[Step]:
        yield head(content_type="application/json", chunked=False, length=len(body)) + body

    _kinds, exc, _ = asyncio.run(run_one(script, transport))
    assert isinstance(exc, StreamProtocolError)
    assert "ignored stream=true" in exc.detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_connection_refused(transport: str) -> None:
    async def main() -> None:
        target = make_target(f"http://127.0.0.1:{free_port()}/v1", transport)
        events, exc = await collect(target, request())
        await target.aclose()
        assert events == []
        assert isinstance(exc, ConnectFailed), repr(exc)
        assert "refused" in exc.detail
        assert classify(exc)[:2] == (Outcome.STREAM_ERROR, "connect")

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_failure_mid_stream_leaves_the_pool_usable(transport: str) -> None:
    """A reset connection is dropped; the next request gets a fresh one and succeeds."""
    ok = [head() + chunk(sse(chat_delta(content="ok")) + sse("[DONE]")) + END]

    def script(req: Received) -> Iterable[Step]:
        if req.headers["x-peakload-request-id"] == "bad":
            yield head() + TOKENS[0]
            yield Sleep(0.01)
            yield Reset()
        else:
            yield from ok

    async def main() -> None:
        async with ScriptedServer(script) as srv:
            target = make_target(srv.base_url, transport, max_connections=1)
            _, exc = await collect(target, request("bad"))
            assert isinstance(exc, StreamReset)
            for i in range(3):
                events, exc = await collect(target, request(f"good{i}"))
                assert exc is None and count(events, EventKind.CONTENT) == 1
            await target.aclose()
        assert srv.connections == 2  # the reset one, then one kept alive for three requests

    asyncio.run(main())


def test_classify_foreign_exceptions() -> None:
    assert classify(asyncio.CancelledError())[0] == Outcome.CANCELLED
    assert classify(TimeoutError())[:2] == (Outcome.TIMEOUT, "deadline")
    assert classify(ConnectionResetError())[:2] == (Outcome.STREAM_ERROR, "reset")
    assert classify(ConnectionRefusedError())[:2] == (Outcome.STREAM_ERROR, "connect")
    assert classify(KeyError("x"))[:2] == (Outcome.STREAM_ERROR, "internal")
    _, _, _, detail = classify(
        InBandError("echo: Authorization: Bearer sk-canary1234567890 ?key=zzz")
    )
    assert "sk-canary" not in detail and "zzz" not in detail


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_done_without_body_end_still_finishes_cleanly(transport: str) -> None:
    """A server that sends [DONE] but never ends the chunked body: DONE is yielded at once and
    the stream ends without an error (the socket is dropped, not reused)."""

    def script(_: Received) -> Iterable[Step]:
        yield head() + TOKENS[0] + chunk(sse("[DONE]"))
        yield Hang()

    kinds, exc, _ = asyncio.run(run_one(script, transport, idle_s=0.5))
    assert exc is None, repr(exc)
    assert kinds == [EventKind.SENT, EventKind.HEADERS, EventKind.CONTENT, EventKind.DONE]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cancel_mid_stream_and_pool_wait_are_bounded(transport: str) -> None:
    """Cancelling the task that streams releases its connection; a request waiting for a free
    connection is bounded by its deadline (phase connect)."""

    def script(req: Received) -> Iterable[Step]:
        if req.headers["x-peakload-request-id"].startswith("hang"):
            yield head() + TOKENS[0]
            yield Hang()
        else:
            yield head() + chunk(sse(chat_delta(content="ok")) + sse("[DONE]")) + END

    async def main() -> None:
        async with ScriptedServer(script) as srv:
            target = make_target(srv.base_url, transport, max_connections=1)
            first_token = asyncio.Event()

            async def consume() -> None:
                async for ev in target.stream(request("hang1"), time.perf_counter_ns):
                    if ev.kind == EventKind.CONTENT:
                        first_token.set()

            task = asyncio.create_task(consume())
            await asyncio.wait_for(first_token.wait(), 5)
            _, exc = await collect(target, request("waits", deadline_s=0.3))
            assert isinstance(exc, PhaseTimeout) and exc.phase == "connect", repr(exc)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert classify(asyncio.CancelledError())[0] == Outcome.CANCELLED
            events, exc = await collect(target, request("after", deadline_s=2))
            assert exc is None and count(events, EventKind.DONE) == 1
            await target.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_deadline_while_the_server_does_not_read_a_large_body(transport: str) -> None:
    async def main() -> None:
        stop = asyncio.Event()

        async def never_reads(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await stop.wait()
            writer.close()

        port = free_port()
        server = await asyncio.start_server(never_reads, "127.0.0.1", port)
        target = make_target(f"http://127.0.0.1:{port}/v1", transport)
        big = request(deadline_s=0.5, messages=[{"role": "user", "content": "x" * 16_000_000}])
        t0 = asyncio.get_running_loop().time()
        _, exc = await collect(target, big)
        elapsed = asyncio.get_running_loop().time() - t0
        await target.aclose()
        stop.set()
        server.close()
        await server.wait_closed()
        assert isinstance(exc, PhaseTimeout) and exc.phase == "headers", repr(exc)
        assert elapsed < 3.0

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_compressed_stream_is_refused(transport: str) -> None:
    def script(req: Received) -> Iterable[Step]:
        assert req.headers["accept-encoding"] == "identity"
        yield head(headers={"content-encoding": "gzip"}) + chunk(b"\x1f\x8b garbage") + END

    _, exc, _ = asyncio.run(run_one(script, transport))
    assert isinstance(exc, StreamProtocolError) and "content-encoding: gzip" in exc.detail
