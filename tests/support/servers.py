"""A test's server subprocess on a free loopback port, the one way the real engines are run
(tests/support/engine.py: llama-server; tests/support/vllm.py: vLLM): started with its output in
a log file, waited on until it answers, its Prometheus samples read, and stopped (its whole
process group where it was started in one) when the caller is done.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadgen.targets.prometheus import parse_exposition
from tests.support.ports import free_port
from tests.support.procs import stop_process

READY_POLL_S = 0.2


@dataclass
class LocalServer:
    """A running server: `url` is its root (`/health`, `/metrics`), `base_url` ends in /v1.
    `group`: started in its own session, so stop() signals every process it started."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    name: str  # what messages call it: "llama-server", "vLLM"
    group: bool
    stop_timeout_s: float

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def metrics_url(self) -> str:
        return self.url + "/metrics"

    def metrics(self) -> dict[str, float]:
        """Its Prometheus samples now, summed over labels per sample name, except `le`: a
        histogram's `_bucket` series keep it (`name_bucket{le="0.1"}`)."""
        text = httpx.get(self.metrics_url, timeout=5.0).raise_for_status().text
        out: dict[str, float] = {}
        for s in parse_exposition(text, 0):
            key = f'{s.name}{{le="{s.labels["le"]}"}}' if "le" in s.labels else s.name
            out[key] = out.get(key, 0.0) + s.value
        return out

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> int:
        """SIGTERM (to its group, if it has one), SIGKILL after stop_timeout_s; its exit code."""
        return stop_process(self.proc, self.stop_timeout_s, group=self.group)


def launch(
    name: str,
    command: Callable[[int], list[str]],
    log_dir: Path,
    *,
    stop_timeout_s: float,
    env: Mapping[str, str] | None = None,
    group: bool = False,
) -> LocalServer:
    """Start `command(port)` on a free loopback port, stdout and stderr into
    `log_dir/<name>-<port>.log`; `group`: in a session of its own (a server that starts
    children, so they are stopped with it)."""
    port = free_port()
    log = log_dir / f"{name.lower()}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command(port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=group,
        )
    return LocalServer(proc, port, log, name, group, stop_timeout_s)


@contextlib.contextmanager
def serving(
    server: LocalServer, ready: Callable[[LocalServer], bool], timeout_s: float
) -> Iterator[LocalServer]:
    """Wait until `ready(server)` (a transport error counts as not yet), yield it, stop it on
    exit, also when it never got ready. RuntimeError with its log's tail if it exits first or is
    not ready within `timeout_s` (monotonic clock)."""
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if server.proc.poll() is not None:
                raise RuntimeError(
                    f"{server.name} exited with {server.proc.returncode}:\n{server.log_tail()}"
                )
            with contextlib.suppress(httpx.TransportError):
                if ready(server):
                    break
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"{server.name} not ready within {timeout_s} s (log {server.log}):\n"
                    f"{server.log_tail(2000)}"
                )
            time.sleep(READY_POLL_S)
        yield server
    finally:
        server.stop()


def healthy(server: LocalServer) -> bool:
    """Its /health answers 200."""
    return httpx.get(server.url + "/health", timeout=2.0).status_code == 200


def environ_without(*names: str) -> dict[str, str]:
    """This process's environment less `names` (a server in another venv must not read ours)."""
    return {k: v for k, v in os.environ.items() if k not in names}
