"""OpenAITarget end to end on loopback: what it sends, keep-alive and pool limits, warm-up,
non-streaming bodies, TLS, preflight messages, and that a canary API key never leaks."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from loadgen.errors import PreflightError, TransportError
from loadgen.scrub import MARK
from loadgen.target import EventKind
from loadgen.targets import classify
from loadgen.targets.preflight import preflight
from tests.loadgen.targets.helpers import (
    TRANSPORTS,
    collect,
    count,
    make_target,
    request,
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
    sse,
    usage_chunk,
)
from tests.support.ports import free_port

CANARY = "sk-canary-7f3a9e1b2c4d5e6f"
OK_BODY = sse(chat_delta(content="hi")) + sse(usage_chunk(3, 1)) + sse("[DONE]")


def ok_script(_: Received) -> Iterable[Step]:
    yield head() + chunk(OK_BODY) + END


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_what_is_sent(transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEAKLOAD_TEST_KEY", CANARY)

    async def main() -> None:
        async with ScriptedServer(ok_script) as srv:
            target = make_target(
                srv.base_url, transport, api_key_env="PEAKLOAD_TEST_KEY", headers={"X-Team": "a"}
            )
            _, exc = await collect(target, request("rid-1"))
            assert exc is None
            given = request("rid-2", model="other", stream=True, stream_options={"x": 1})
            _, exc = await collect(target, given)
            assert exc is None
            await target.aclose()
        first, second = srv.requests
        assert first.path == "/v1/chat/completions"
        assert first.headers["x-peakload-request-id"] == "rid-1"
        assert first.headers["authorization"] == f"Bearer {CANARY}"
        assert first.headers["accept"] == "text/event-stream"
        assert first.headers["x-team"] == "a"
        assert first.json() == {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "stream_options": {"include_usage": True},
        }
        assert second.json() == {"model": "other", "stream": True, "stream_options": {"x": 1}}
        assert CANARY not in repr(target)

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_completions_and_non_streaming(transport: str) -> None:
    stream_body = (
        sse({"choices": [{"text": "Once"}]}) + sse({"choices": [{"text": " upon"}]}) + sse("[DONE]")
    )
    whole = json.dumps(
        {
            "choices": [{"text": "Once upon a time"}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 4},
        }
    ).encode()

    def script(req: Received) -> Iterable[Step]:
        assert req.path == "/v1/completions"
        if req.json()["stream"]:
            yield head() + chunk(stream_body) + END
        else:
            yield head(content_type="application/json") + chunk(whole[:10])
            yield Sleep(0.003)
            yield chunk(whole[10:]) + END

    async def main() -> None:
        async with ScriptedServer(script) as srv:
            target = make_target(srv.base_url, transport, api="openai-completions")
            events, exc = await collect(target, request(prompt="p"))
            assert exc is None and text_of(events, EventKind.CONTENT) == "Once upon"
            await target.aclose()
            target = make_target(srv.base_url, transport, api="openai-completions", stream=False)
            events, exc = await collect(target, request(prompt="p"))
            assert exc is None
            assert [e.kind for e in events[2:]] == [
                EventKind.CONTENT,
                EventKind.USAGE,
                EventKind.DONE,
            ]
            assert events[2].text == "Once upon a time" and events[2].tokens == 1
            await target.aclose()
        assert srv.requests[1].json()["stream"] is False
        assert "stream_options" not in srv.requests[1].json()

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pool_limit_keepalive_and_warm(transport: str) -> None:
    def slow(_: Received) -> Iterable[Step]:
        yield head()
        yield Sleep(0.05)
        yield chunk(OK_BODY) + END

    async def main() -> None:
        async with ScriptedServer(slow) as srv:
            target = make_target(srv.base_url, transport, max_connections=2)
            await target.warm(2)
            warmed = srv.connections
            results = await asyncio.gather(*(collect(target, request(f"r{i}")) for i in range(6)))
            await target.aclose()
        assert warmed == 2
        assert all(exc is None and count(ev, EventKind.DONE) == 1 for ev, exc in results)
        assert srv.connections == 2  # warmed connections carried all six requests

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_canary_key_never_leaks(transport: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that echoes our Authorization header into every kind of failure."""
    monkeypatch.setenv("PEAKLOAD_TEST_KEY", CANARY)

    def echo(req: Received) -> Iterable[Step]:
        auth = req.headers["authorization"]
        rid = req.headers["x-peakload-request-id"]
        if rid == "401":
            body = json.dumps({"error": {"message": f"bad key {auth}"}}).encode()
            yield head(401, content_type="application/json", chunked=False, length=len(body))
            yield body
        elif rid == "inband":
            yield head() + chunk(sse({"error": {"message": f"you sent {auth}"}})) + END
        elif rid == "html":
            page = f"<html><title>{auth}</title></html>".encode()
            yield head(content_type="text/html", chunked=False, length=len(page)) + page
        elif rid == "garbage":
            yield head() + chunk(f"data: {auth}\n\n".encode()) + END
        else:
            yield head(500, content_type="text/plain") + chunk(auth.encode()) + END

    async def main() -> None:
        async with ScriptedServer(echo) as srv:
            target = make_target(srv.base_url, transport, api_key_env="PEAKLOAD_TEST_KEY")
            for rid in ("401", "inband", "html", "garbage", "500"):
                _, exc = await collect(target, request(rid))
                assert isinstance(exc, TransportError), (rid, exc)
                texts = [str(exc), repr(exc), exc.detail, repr(exc.args), *classify(exc)[3:]]
                assert all(CANARY not in str(t) for t in texts), (rid, texts)
                assert MARK in exc.detail or rid == "garbage", (rid, exc.detail)
                if rid in ("401", "500"):
                    assert str(exc).startswith(f"HTTP {rid}: "), str(exc)
            with pytest.raises(PreflightError) as pe:
                await preflight(target)
            assert CANARY not in str(pe.value) and CANARY not in repr(target)
            await target.aclose()

    asyncio.run(main())
    monkeypatch.delenv("PEAKLOAD_TEST_KEY")
    with pytest.raises(PreflightError, match="PEAKLOAD_TEST_KEY"):
        make_target("http://127.0.0.1:1/v1", transport, api_key_env="PEAKLOAD_TEST_KEY")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_https(transport: str, tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))

    async def main() -> None:
        async with ScriptedServer(ok_script, ssl_context=server_ctx) as srv:
            target = make_target(srv.base_url, transport, ssl_context=client_ctx)
            events, exc = await collect(target, request())
            assert exc is None and text_of(events, EventKind.CONTENT) == "hi"
            await target.aclose()
            untrusting = make_target(srv.base_url, transport)  # system CAs: self-signed fails
            events, exc = await collect(untrusting, request())
            await untrusting.aclose()
            assert events == [] and exc is not None
            assert classify(exc)[:2] == ("stream_error", "connect"), repr(exc)

    asyncio.run(main())


def test_ipv6_loopback() -> None:
    try:
        free_port("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")

    async def main() -> None:
        async with ScriptedServer(ok_script, host="::1") as srv:
            for transport in TRANSPORTS:
                target = make_target(srv.base_url, transport)
                events, exc = await collect(target, request())
                await target.aclose()
                assert exc is None and count(events, EventKind.DONE) == 1
        assert srv.requests[0].headers["host"] == f"[::1]:{srv.port}"

    asyncio.run(main())


def _status(status: int, ctype: str, body: bytes) -> Iterable[Step]:
    yield head(status, content_type=ctype, chunked=False, length=len(body)) + body


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (ok_script, None),
        (lambda _: _status(401, "application/json", b'{"error":"no"}'), "credentials"),
        (lambda _: _status(404, "text/plain", b"Not Found"), "/v1"),
        (lambda _: _status(200, "text/html", b"<html><title>Home</title>"), "HTML instead"),
        (lambda _: _status(200, "application/json", b'{"choices":[]}'), "ignored stream=true"),
        (lambda _: _status(400, "application/json", b'{"error":"bad model"}'), "target.model"),
    ],
)
def test_preflight_messages(script: object, expected: str | None) -> None:
    async def main() -> None:
        async with ScriptedServer(script) as srv:  # type: ignore[arg-type]
            target = make_target(srv.base_url, "raw")
            try:
                if expected is None:
                    await preflight(target)
                    body = srv.requests[0].json()
                    assert body["max_tokens"] == 2 and body["stream"] is True
                else:
                    with pytest.raises(PreflightError, match=expected) as ei:
                        await preflight(target)
                    assert f"127.0.0.1:{srv.port}/v1/chat/completions" in str(ei.value)
            finally:
                await target.aclose()

    asyncio.run(main())


def test_preflight_unreachable() -> None:
    async def main() -> None:
        target = make_target(f"http://127.0.0.1:{free_port()}/v1", "raw")
        with pytest.raises(PreflightError, match=r"cannot reach .*refused.*base_url"):
            await preflight(target)
        await target.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pool_under_churn(transport: str) -> None:
    """Resets, cancellations mid-wait and mid-stream, and successes through a pool of 3: nothing
    leaks, nobody waits forever, and the pool still serves afterwards."""

    def script(req: Received) -> Iterable[Step]:
        rid = int(req.headers["x-peakload-request-id"])
        yield head() + chunk(sse(chat_delta(content="a")))
        yield Sleep(0.01 * (rid % 4))
        if rid % 3 == 0:
            from tests.loadgen.targets.scripted import Reset

            yield Reset()
        else:
            yield chunk(sse("[DONE]")) + END

    async def one(i: int) -> str:
        try:
            if i % 5 == 0:
                _, exc = await asyncio.wait_for(collect(target, request(str(i))), 0.015)
            else:  # "forever" is far past the ms each takes: a CPU-starved host may queue them
                _, exc = await collect(target, request(str(i), deadline_s=60))
        except TimeoutError:
            return "cancelled"
        return "ok" if exc is None else type(exc).__name__

    async def main() -> None:
        nonlocal target
        async with ScriptedServer(script) as srv:
            target = make_target(srv.base_url, transport, max_connections=3)
            results = await asyncio.gather(*(one(i) for i in range(1, 31)))
            assert set(results) <= {"ok", "StreamReset", "cancelled"}, results
            assert results.count("ok") >= 14
            for i in (31, 32, 34, 37):  # neither reset (3k) nor cancelled (5k)
                assert await one(i) == "ok"
            if transport == "raw":
                pool = target._pool
                assert pool is not None and pool.open <= 3 and len(pool.idle) <= 3
            await target.aclose()

    target = None  # type: ignore[assignment]
    asyncio.run(main())


def test_preflight_of_a_non_streaming_spec() -> None:
    whole = b'{"choices": [{"message": {"content": "hi"}}], "usage": {"completion_tokens": 1}}'

    def script(req: Received) -> Iterable[Step]:
        assert req.json()["stream"] is False and "stream_options" not in req.json()
        yield from _status(200, "application/json", whole)

    async def main() -> None:
        async with ScriptedServer(script) as srv:
            target = make_target(srv.base_url, "raw", stream=False)
            await preflight(target)
            await target.aclose()
        assert len(srv.requests) == 1

    asyncio.run(main())
