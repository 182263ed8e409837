"""The sim as a real subprocess: OpenAI-compatible streams, exact fixed schedule in the truth log,
non-streaming bodies, the side endpoints, request ids, and bad requests."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.loadgen.sim.helpers import chat_body, stream_post
from tests.support.sim import SimProcess


def test_stream_shape_usage_and_request_id(sim: SimProcess) -> None:
    body = chat_body(max_tokens=12, stream_options={"include_usage": True}, ignore_eos=True)
    s = stream_post(sim.base_url + "/chat/completions", body, {"x-peakload-request-id": "req-A"})
    assert s.status == 200
    assert s.headers["content-type"].startswith("text/event-stream")
    assert s.headers["transfer-encoding"] == "chunked"
    assert s.headers["x-peakload-request-id"] == "req-A"
    assert s.data[-1] == "[DONE]"
    first = s.chunks[0]["choices"][0]["delta"]
    assert first == {"role": "assistant", "content": ""}  # role-only first chunk
    content = s.deltas()
    assert len(content) == 12  # one token per event by default
    text = "".join(content)
    assert len(text.split()) == 12  # one word = one token
    usage = s.chunks[-1]["usage"]
    assert s.chunks[-1]["choices"] == []
    assert usage["prompt_tokens"] == 4 and usage["completion_tokens"] == 12
    assert s.chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_fixed_schedule_in_truth_log(sim: SimProcess) -> None:
    """Token i of every stream is due exactly 50 ms + i * 10 ms after its request arrived, for
    8 concurrent streams; writes are never early and (loosely, the host is shared) on time."""
    url = sim.base_url + "/chat/completions"
    with ThreadPoolExecutor(8) as pool:
        results = list(
            pool.map(
                lambda i: stream_post(
                    url, chat_body(max_tokens=20), {"x-peakload-request-id": f"f{i}"}
                ),
                range(8),
            )
        )
    assert all(r.status == 200 and len(r.deltas()) == 20 for r in results)
    rows = sim.wait_truth(8)
    assert len(rows) == 8
    lateness = []
    for row in rows:
        assert row["outcome"] == "ok" and row["completion_tokens"] == 20
        due = [row["request_ns"] + 50_000_000 + i * 10_000_000 for i in range(20)]
        assert row["chunk_due_ns"] == due
        assert row["chunk_tokens"] == [1] * 20
        assert all(w >= d for w, d in zip(row["chunk_ns"], due, strict=True))
        assert row["response_headers_ns"] >= row["request_ns"] >= row["headers_ns"]
        lateness += row["chunk_late_us"]
    lateness.sort()
    assert lateness[len(lateness) // 2] < 10_000  # median write within 10 ms of due


def test_non_streaming_and_completions(sim: SimProcess) -> None:
    r = httpx.post(sim.base_url + "/chat/completions", json=chat_body(max_tokens=6, stream=False))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["object"] == "chat.completion"
    assert len(body["choices"][0]["message"]["content"].split()) == 6
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    assert r.headers["x-peakload-request-id"].startswith("sim-")
    prompt = {"prompt": "a b c d e", "max_tokens": 3, "stream": True}
    s = stream_post(sim.base_url + "/completions", prompt)
    assert [c["object"] for c in s.chunks] == ["text_completion"] * 4
    assert len("".join(c["choices"][0]["text"] for c in s.chunks).split()) == 3


def test_output_has_multibyte_tokens(sim: SimProcess) -> None:
    s = stream_post(sim.base_url + "/chat/completions", chat_body(max_tokens=60))
    text = "".join(s.deltas())
    assert len(text.encode()) > len(text)  # some tokens are multi-byte UTF-8
    assert len(text.split()) == 60


def test_side_endpoints(sim: SimProcess) -> None:
    with httpx.Client() as c:
        assert c.get(sim.base_url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
        models = c.get(sim.base_url + "/models").json()
        assert models["data"][0]["id"] == "peakload-sim"
        c.post(sim.base_url + "/chat/completions", json=chat_body(max_tokens=3, stream=False))
        metrics = c.get(sim.base_url.removesuffix("/v1") + "/metrics").text
        assert "peakload_sim:num_requests_running 0" in metrics
        assert "peakload_sim:generation_tokens_total 3" in metrics
        assert 'peakload_sim:requests_total{status="200"} 1' in metrics
        assert "peakload_sim:kv_cache_usage_perc" in metrics
        assert c.get(sim.base_url + "/nope").status_code == 404


def test_bad_requests_are_400_and_logged(sim: SimProcess) -> None:
    url = sim.base_url + "/chat/completions"
    with httpx.Client() as c:
        r = c.post(url, content=b"{not json", headers={"x-peakload-request-id": "bad-1"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = c.post(url, json=chat_body(max_tokens=0), headers={"x-peakload-request-id": "bad-2"})
        assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
        r = c.post(url, json={"messages": "hi"}, headers={"x-peakload-request-id": "bad-3"})
        assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
        r = c.post(url, json=chat_body(), headers={"x-peakload-sim-fault": "bogus"})
        assert r.status_code == 400 and "unknown fault kind" in r.json()["error"]["message"]
    rows = {r["request_id"]: r for r in sim.wait_truth(4)}
    assert all(rows[f"bad-{i}"]["status"] == 400 for i in (1, 2, 3))
    assert all(rows[f"bad-{i}"]["outcome"] == "bad_request" for i in (1, 2, 3))


def test_keep_alive_and_summary_on_sigterm(sim: SimProcess) -> None:
    with httpx.Client() as c:
        for _ in range(3):
            r = c.post(
                sim.base_url + "/chat/completions", json=chat_body(max_tokens=2, stream=False)
            )
            assert r.status_code == 200
    assert sim.stop() == 0
    summary = sim.read_summary()
    assert summary is not None
    assert summary["by_status"] == {"200": 3} and summary["by_outcome"] == {"ok": 3}
    lines = sim.truth_log.read_text().splitlines()
    assert json.loads(lines[-1])["type"] == "summary" and len(lines) == 4


def test_raw_socket_pipelining_and_expect_continue(sim: SimProcess) -> None:
    body = json.dumps(chat_body(max_tokens=2, stream=False)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as s:
        s.sendall(head + b"\r\n" + body + head + b"\r\n" + body)  # two requests, one write
        got = b""
        while got.count(b"HTTP/1.1 200 OK") < 2 or not got.endswith(b"}"):
            got += s.recv(65536)
        s.sendall(head + b"expect: 100-continue\r\n\r\n")
        assert s.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        assert s.recv(65536).startswith(b"HTTP/1.1 200 OK")


def test_sigterm_mid_stream_logs_the_open_request(sim: SimProcess) -> None:
    url = sim.base_url + "/chat/completions"
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(
            stream_post, url, chat_body(max_tokens=1000), {"x-peakload-request-id": "long"}
        )
        deadline = time.monotonic() + 10
        while (
            "peakload_sim:active_responses 1"
            not in httpx.get(sim.base_url.removesuffix("/v1") + "/metrics").text
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)
        assert sim.stop() == 0
        partial = fut.result(timeout=10)
    assert partial.error is not None  # the stream was cut, not completed
    (row,) = [r for r in sim.read_truth() if r["request_id"] == "long"]
    assert row["outcome"] == "shutdown" and 0 < row["completion_tokens"] < 1000
    assert sim.read_summary()["by_outcome"] == {"shutdown": 1}  # type: ignore[index]


def test_malformed_request_gets_400_and_close(sim: SimProcess) -> None:
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\n\r\nNONSENSE\r\n\r\n")
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    assert got.startswith(b"HTTP/1.1 200 OK")  # the good request before it is answered
    assert b"HTTP/1.1 400 Bad Request" in got and b"malformed request line" in got
