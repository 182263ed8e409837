"""`target.resend_on_stale` end to end (loadgen.targets.resend): a server that reads the second
request on a kept-alive connection and closes without a byte of answer (its application had the
request: its TCP acknowledged every byte). By default that request is not sent again (a hosted
API would bill a duplicate) and fails naming why; `true` sends it again on a new connection;
`false` never does. Both transports; the server's own log says how often it saw each request,
which must be exactly what the record says."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from loadgen.target import EventKind
from loadgen.targets.http_common import StreamTruncated
from loadgen.targets.resend import bytes_acked, reached, should_resend
from tests.loadgen.targets.helpers import TRANSPORTS, collect, make_target, request
from tests.loadgen.targets.scripted import (
    END,
    Close,
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

ANSWER = [
    head(headers={"keep-alive": "timeout=5, max=100"}),
    chunk(sse(chat_delta(content="hi"))),
    chunk(sse(usage_chunk(3, 1))),
    chunk(sse("[DONE]")),
    END,
]


async def _two_requests(transport: str, policy: bool | None) -> tuple[list[Any], Counter[str]]:
    seen: Counter[str] = Counter()

    def script(req: Received) -> list[Step]:
        rid = req.headers["x-peakload-request-id"]
        seen[rid] += 1
        if rid == "r2" and seen[rid] == 1:
            return [Close()]  # read it whole, then close: no byte of answer
        return list(ANSWER)

    async with ScriptedServer(script) as srv:
        target = make_target(srv.base_url, transport, max_connections=1, resend_on_stale=policy)
        try:
            results = [await collect(target, request(rid)) for rid in ("r1", "r2")]
        finally:
            await target.aclose()
    return results, seen


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("policy", [None, True, False], ids=["default", "true", "false"])
def test_a_request_the_server_read_is_resent_only_when_told(
    transport: str, policy: bool | None
) -> None:
    results, seen = asyncio.run(_two_requests(transport, policy))
    (ev1, err1), (ev2, err2) = results
    assert err1 is None and any(e.kind == EventKind.DONE for e in ev1)
    resent = sum(e.kind == EventKind.RESENT for e in ev2)
    if policy is True:
        assert err2 is None, repr(err2)
        assert resent == 1
        assert seen == {"r1": 1, "r2": 2}  # the record's re-send is the server's second copy
    else:
        assert isinstance(err2, StreamTruncated), repr(err2)
        assert resent == 0
        assert seen == {"r1": 1, "r2": 1}
        why = "resend_on_stale = false" if policy is False else "acknowledged the request"
        assert "not re-sent" in str(err2) and why in str(err2), str(err2)


async def _resent_beside_another_dead_connection(transport: str) -> tuple[Any, Counter[str], int]:
    """Two connections kept alive (r1 and r2 at once), then the server drops both without a
    word; r3 goes on one of them and is sent again (resend_on_stale = true). The other one is
    still idle in the pool, dead in the same moment: the re-send must not take it."""
    seen: Counter[str] = Counter()
    dead: set[int] = set()

    def script(req: Received) -> list[Step]:
        rid = req.headers["x-peakload-request-id"]
        seen[rid] += 1
        if req.connection in dead:
            return [Close()]  # read whole, closed without a byte: a connection the server dropped
        return [Sleep(0.1), *ANSWER]  # r1 and r2 in flight together: two connections

    async with ScriptedServer(script) as srv:
        target = make_target(srv.base_url, transport, max_connections=2, resend_on_stale=True)
        try:
            first = await asyncio.gather(*(collect(target, request(r)) for r in ("r1", "r2")))
            assert [err for _, err in first] == [None, None]
            assert srv.connections == 2
            dead.update((1, 2))
            result = await collect(target, request("r3"))
        finally:
            await target.aclose()
    return result, seen, srv.connections


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_request_is_resent_on_a_new_connection_not_another_idle_one(transport: str) -> None:
    (events, err), seen, connections = asyncio.run(
        _resent_beside_another_dead_connection(transport)
    )
    assert err is None, repr(err)
    assert sum(e.kind == EventKind.RESENT for e in events) == 1
    assert seen["r3"] == 2
    assert connections == 3  # the re-send opened one


def test_the_reach_rule() -> None:
    assert reached(100, 100) is False  # nothing of the request acknowledged
    assert reached(100, 350) is True
    assert reached(None, None, reset=True) is False
    assert reached(None, 350) is None
    assert should_resend(None, False) and not should_resend(None, None)
    assert not should_resend(None, True) and should_resend(True, True)
    assert not should_resend(False, False)


def test_bytes_acked_counts_what_the_peer_took() -> None:
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    cli = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    try:
        before = bytes_acked(cli)
        assert before is not None
        cli.sendall(b"x" * 1000)
        peer.recv(1000)
        for _ in range(100):  # the ACK comes back within moments on loopback
            after = bytes_acked(cli)
            if after is not None and after >= before + 1000:
                break
            asyncio.run(asyncio.sleep(0.01))
        assert after == before + 1000
    finally:
        for s in (cli, peer, srv):
            s.close()
