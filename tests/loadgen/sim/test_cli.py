"""`peakload sim` as a user runs it: prints its URL once listening, stops cleanly on SIGTERM, and
refuses bad configuration with one clear message and a non-zero exit."""

from __future__ import annotations

import json
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port

PEAKLOAD = [sys.executable, "-c", "from ui.cli import main; main()"]


def test_peakload_sim_prints_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    truth = tmp_path / "t.jsonl"
    proc = subprocess.Popen(
        [*PEAKLOAD, "sim", "--port", str(port), "--truth-log", str(truth), "--seed", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 20)
        assert ready, "no URL printed within 20 s"
        url = proc.stdout.readline().decode().strip()
        assert url == f"http://127.0.0.1:{port}/v1"
        r = httpx.post(url + "/completions", json={"prompt": "a b", "max_tokens": 2})
        assert r.status_code == 200 and r.headers["x-peakload-request-id"] == "sim-3-1"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert code == 0
    lines = [json.loads(x) for x in truth.read_text().splitlines()]
    assert [x["type"] for x in lines] == ["request", "summary"]


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.sim", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fault", "gremlin=0.1"], "unknown fault kind 'gremlin'"),
        (["--fault", "429=1.5"], "rate"),
        (["--preset", "small-gpu", "--ttft-ms", "5"], "--ttft-ms"),
        (["--stall", "5"], "--stall"),
        (["--slots", "0"], "slots"),
    ],
)
def test_bad_options_exit_nonzero_with_a_clear_message(args: list[str], needle: str) -> None:
    res = _run(args)
    assert res.returncode == 2
    assert "error" in res.stderr and needle in res.stderr
    assert res.stdout == ""  # no URL: it never listened


def test_bad_config_file(tmp_path: Path) -> None:
    bad = tmp_path / "sim.json"
    bad.write_text('{"mode": "warp"}')
    res = _run(["--config", str(bad)])
    assert res.returncode == 2 and str(bad) in res.stderr and "mode" in res.stderr
    res = _run(["--config", str(tmp_path / "missing.json")])
    assert res.returncode == 2 and "cannot read" in res.stderr


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = _run(["--port", str(port)])
    assert res.returncode == 1 and "cannot listen" in res.stderr
