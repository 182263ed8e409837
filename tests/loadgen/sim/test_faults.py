"""Every fault kind, forced per request by header, as a plain httpx client sees it; plus the
server-wide stall, the hosted rate budget, and seeded fault draws that reproduce exactly."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.loadgen.sim.helpers import Streamed, chat_body, stream_post
from tests.support.sim import SimProcess, start_sim

FAST = ["--preset", "fixed", "--ttft-ms", "10", "--itl-ms", "10"]


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    with start_sim(FAST, tmp_path_factory.mktemp("faults")) as sp:
        yield sp


def _post(sp: SimProcess, fault: str, rid: str, **body: Any) -> Streamed:
    headers = {"x-peakload-sim-fault": fault, "x-peakload-request-id": rid}
    return stream_post(sp.base_url + "/chat/completions", chat_body(**body), headers)


def _row(sp: SimProcess, rid: str) -> dict[str, Any]:
    for _ in range(3):
        rows = {r["request_id"]: r for r in sp.wait_truth(1)}
        if rid in rows:
            return rows[rid]
        sp.wait_truth(len(rows) + 1, timeout_s=2)
    raise AssertionError(f"{rid} not in the truth log")


def test_http_statuses(fast_sim: SimProcess) -> None:
    url = fast_sim.base_url + "/chat/completions"
    r = httpx.post(
        url,
        json=chat_body(),
        headers={"x-peakload-sim-fault": "429:2", "x-peakload-request-id": "s429"},
    )
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert r.json()["error"]["code"] == 429
    r = httpx.post(
        url,
        json=chat_body(),
        headers={"x-peakload-sim-fault": "http_503", "x-peakload-request-id": "s503"},
    )
    assert r.status_code == 503 and "retry-after" not in r.headers
    r = httpx.post(url, json=chat_body(), headers={"x-peakload-sim-fault": "html_error:502"})
    assert r.status_code == 502 and r.headers["content-type"].startswith("text/html")
    s = _post(fast_sim, "html_error", "html200")
    assert s.status == 200 and s.headers["content-type"].startswith("text/html")
    assert s.body.startswith(b"<html>")
    assert (
        _row(fast_sim, "s429")["status"] == 429
        and _row(fast_sim, "s429")["outcome"] == "http_error"
    )
    assert _row(fast_sim, "s503")["status"] == 503
    assert _row(fast_sim, "html200")["outcome"] == "html_error"


def test_in_band_error_after_n_tokens(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "error_event:3", "ev", max_tokens=10)
    assert s.status == 200
    assert len(s.deltas()) == 3
    errors = [json.loads(d) for d in s.data if d.startswith('{"error"')]
    assert len(errors) == 1 and "after 3 tokens" in errors[0]["error"]["message"]
    row = _row(fast_sim, "ev")
    assert row["outcome"] == "error_event" and row["completion_tokens"] == 3


def test_reset_after_n_tokens(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "reset:2", "rst", max_tokens=10)
    assert s.error is not None
    assert len(s.deltas()) == 2 and "[DONE]" not in s.data
    row = _row(fast_sim, "rst")
    assert row["outcome"] == "reset" and row["completion_tokens"] == 2


def test_trickle_sends_one_byte_per_write(fast_sim: SimProcess) -> None:
    url = fast_sim.base_url + "/chat/completions"
    headers = {"x-peakload-sim-fault": "trickle:0.02", "x-peakload-request-id": "trk"}
    s = stream_post(url, chat_body(max_tokens=3), headers, max_reads=15)
    assert s.status == 200 and len(s.reads) == 15
    assert all(len(r) == 1 for r in s.reads)
    assert s.body == b'data: {"id":"ch'  # the start of a well-formed event, byte by byte
    row = _row(fast_sim, "trk")
    assert row["outcome"] == "client_closed" and row["faults"] == ["trickle:0.02"]


def test_no_done(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "no_done", "nd", max_tokens=4)
    assert s.error is None and len(s.deltas()) == 4
    assert "[DONE]" not in s.data
    assert s.chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert _row(fast_sim, "nd")["outcome"] == "no_done"


def test_multi_token_events(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "multi_token:3", "mt", max_tokens=7)
    assert [len(d.split()) for d in s.deltas()] == [3, 3, 1]
    assert _row(fast_sim, "mt")["chunk_tokens"] == [3, 3, 1]


def test_utf8_split_across_writes(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "utf8_split", "u8", max_tokens=40)
    broken = 0
    for r in s.reads:
        try:
            r.decode("utf-8")
        except UnicodeDecodeError:
            broken += 1
    assert broken >= 1  # a multi-byte character arrived split between reads
    assert len("".join(s.deltas()).split()) == 40
    row = _row(fast_sim, "u8")
    assert sum(row["chunk_tokens"]) == 40 and 0 in row["chunk_tokens"]


def test_many_events_in_one_write(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "coalesce:4", "co", max_tokens=8)
    per_read = [r.count(b"data: ") for r in s.reads]
    assert max(per_read) >= 4
    assert len(s.deltas()) == 8
    assert _row(fast_sim, "co")["chunk_tokens"] == [4, 4]


def test_reasoning_then_answer(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "reasoning:3", "rs", max_tokens=8, stream_options={"include_usage": True})
    assert len(s.deltas("reasoning_content")) == 3
    assert len(s.deltas("content")) == 5
    usage = s.chunks[-1]["usage"]
    assert usage["completion_tokens"] == 8
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_tool_call_deltas(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "tool_calls", "tc", max_tokens=4)
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in s.chunks[1:6]]
    assert calls[0]["id"] == "call_tc" and calls[0]["function"]["name"] == "get_weather"
    assert len("".join(c["function"]["arguments"] for c in calls).split()) == 4
    assert s.chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_non_streaming_server(fast_sim: SimProcess) -> None:
    s = _post(fast_sim, "non_streaming", "ns", max_tokens=5)
    assert s.headers["content-type"] == "application/json"
    assert json.loads(s.body)["usage"]["completion_tokens"] == 5


def test_reasoning_field_name_from_cli(tmp_path: Path) -> None:
    with start_sim(
        [*FAST, "--reasoning-tokens", "2", "--reasoning-field", "reasoning"], tmp_path
    ) as sp:
        s = stream_post(sp.base_url + "/chat/completions", chat_body(max_tokens=4))
        assert len(s.deltas("reasoning")) == 2 and len(s.deltas("content")) == 2


def test_server_wide_stall(tmp_path: Path) -> None:
    """Freeze 0.4 s every 1 s: a 1.6 s stream shows a gap of at least ~0.4 s between writes,
    and nothing is written inside the frozen window."""
    with start_sim([*FAST, "--stall", "0.4/1.0"], tmp_path) as sp:
        s = stream_post(sp.base_url + "/chat/completions", chat_body(max_tokens=160))
        assert len(s.deltas()) == 160
        row = sp.wait_truth(1)[0]
    gaps = [b - a for a, b in zip(row["chunk_ns"], row["chunk_ns"][1:], strict=False)]
    assert max(gaps) >= 350_000_000
    assert max(row["chunk_late_us"]) >= 300_000


def test_hosted_rate_budget(tmp_path: Path) -> None:
    cfg = tmp_path / "hosted.json"
    cfg.write_text(json.dumps({"preset": "hosted", "rate_limit_rps": 1, "rate_limit_burst": 2}))
    with start_sim(["--config", str(cfg)], tmp_path) as sp, httpx.Client() as c:
        codes = [
            c.post(sp.base_url + "/chat/completions", json=chat_body(max_tokens=1, stream=False))
            for _ in range(5)
        ]
    assert [r.status_code for r in codes[:2]] == [200, 200]
    limited = [r for r in codes[2:] if r.status_code == 429]
    assert len(limited) >= 2 and all(int(r.headers["retry-after"]) >= 1 for r in limited)


def _seeded_run(tmp_path: Path, seed: int) -> tuple[list[int], dict[str, Any] | None]:
    args = [*FAST, "--seed", str(seed), "--fault", "429=0.2", "--fault", "503=0.1"]
    with start_sim(args, tmp_path) as sp, httpx.Client() as c:
        codes = [
            c.post(
                sp.base_url + "/chat/completions",
                json=chat_body(max_tokens=1, stream=False),
                headers={"x-peakload-request-id": f"r-{i}"},
            ).status_code
            for i in range(40)
        ]
        sp.stop()
        return codes, sp.read_summary()


def test_seeded_faults_reproduce_and_match_the_log(tmp_path: Path) -> None:
    a, summary = _seeded_run(tmp_path, 7)
    b, _ = _seeded_run(tmp_path, 7)
    c, _ = _seeded_run(tmp_path, 8)
    assert a == b and a != c
    counts = Counter(a)
    assert counts[429] > 0 and counts[503] > 0 and counts[200] > 0
    assert summary is not None
    assert summary["by_status"] == {str(k): v for k, v in sorted(counts.items())}
