"""Pytest fixtures that run the simulated engine (`python -m loadgen.sim`) as a real subprocess on
a free loopback port: `start_sim(args)` (a context manager), `sim` (fixed preset) and
`sim_factory` (start several, each stopped at teardown).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadgen.sim.truth import read_truth
from tests.support.ports import free_port
from tests.support.procs import stop_process

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


@dataclass
class SimProcess:
    """A running sim: `base_url` ends in /v1; `truth_log` is its JSONL ground truth."""

    proc: subprocess.Popen[bytes]
    port: int
    base_url: str
    truth_log: Path
    args: list[str] = field(default_factory=list)

    def read_truth(self) -> list[dict[str, Any]]:
        """Request lines written so far (the log is flushed every 25 ms and at stop)."""
        if not self.truth_log.exists():
            return []
        return read_truth(self.truth_log)[0]

    def read_summary(self) -> dict[str, Any] | None:
        """The summary line (counts by status, outcome, fault); present once stopped."""
        return read_truth(self.truth_log)[1] if self.truth_log.exists() else None

    def wait_truth(self, n: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Wait until at least `n` request lines are in the log, then return them all."""
        deadline = time.monotonic() + timeout_s
        while True:
            rows = self.read_truth()
            if len(rows) >= n or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code (0 on a clean stop)."""
        return stop_process(self.proc, STOP_TIMEOUT_S)


def sim_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "loadgen.sim", *args]


@contextlib.contextmanager
def start_sim(args: list[str], workdir: Path | None = None) -> Iterator[SimProcess]:
    """Start the sim with `args` (plus --port and --truth-log, unless given) and wait for
    /health; stop it with SIGTERM on exit. Raises RuntimeError with its stderr if it dies."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="peakload-sim-")
        workdir = Path(tmp.name)
    port = free_port()
    truth = workdir / f"truth-{port}.jsonl"
    full = list(args)
    if "--port" not in full:
        full += ["--port", str(port)]
    else:
        port = int(full[full.index("--port") + 1])
    if "--truth-log" not in full:
        full += ["--truth-log", str(truth)]
    else:
        truth = Path(full[full.index("--truth-log") + 1])
    stderr_path = workdir / f"sim-{port}.stderr"
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            sim_command(full), cwd=ROOT, stdout=subprocess.PIPE, stderr=err, env=dict(os.environ)
        )
    sp = SimProcess(proc, port, f"http://127.0.0.1:{port}/v1", truth, full)
    try:
        _wait_healthy(sp, stderr_path)
        yield sp
    finally:
        sp.stop()
        if proc.stdout is not None:
            proc.stdout.close()
        if tmp is not None:
            tmp.cleanup()


def _wait_healthy(sp: SimProcess, stderr_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if sp.proc.poll() is not None:
            raise RuntimeError(
                f"sim exited with {sp.proc.returncode}: {stderr_path.read_text(errors='replace')}"
            )
        try:
            if httpx.get(f"http://127.0.0.1:{sp.port}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sim not healthy within {START_TIMEOUT_S} s")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProcess]:
    """The fixed preset (TTFT 50 ms, ITL 10 ms), one per test."""
    with start_sim(["--preset", "fixed"], tmp_path) as sp:
        yield sp


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[[list[str]], SimProcess]]:
    """`sim_factory(args) -> SimProcess`; every sim started is stopped at teardown."""
    with contextlib.ExitStack() as stack:

        def factory(args: list[str]) -> SimProcess:
            return stack.enter_context(start_sim(args, tmp_path))

        yield factory


def truth_by_id(sim: SimProcess, n: int) -> dict[str, dict[str, Any]]:
    """The engine's truth-log lines of its first `n` requests (waited for), by request id."""
    rows = sim.wait_truth(n, timeout_s=20.0)
    return {r["request_id"]: r for r in rows if r.get("type", "request") == "request"}
