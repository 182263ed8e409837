"""A real Prometheus server (Debian's `prometheus` binary) for a test: `start_prometheus(targets)`
writes a config scraping those loopback addresses at a short interval, starts the server on a
free loopback port with its data in a temp dir, waits until it is ready, and stops exactly that
process at the end. `PROMETHEUS_BINARY` (or `prometheus` on PATH) names the binary; tests skip
with the reason when it is absent (deploy/local/prometheus.sh installs it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.ports import free_port
from tests.support.procs import stop_process

START_TIMEOUT_S = 30.0


def prometheus_binary() -> str:
    """The binary's path, or skip the test saying how to get it."""
    path = os.environ.get("PROMETHEUS_BINARY") or shutil.which("prometheus")
    if not path:
        pytest.skip("no prometheus binary (apt-get install prometheus; deploy/local/prometheus.sh)")
    return path


@dataclass
class PrometheusServer:
    proc: subprocess.Popen[bytes]
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each {"metric": labels, "value": [t, "v"]})."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def targets_up(self) -> bool:
        """Every scrape target's last scrape succeeded."""
        r = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()
        active = r["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)


def config_text(targets: list[str], interval_s: float) -> str:
    ms = max(1, round(interval_s * 1000))
    listed = ", ".join(f'"{t}"' for t in targets)
    return (
        "global:\n"
        f"  scrape_interval: {ms}ms\n"
        f"  scrape_timeout: {ms}ms\n"
        "scrape_configs:\n"
        "  - job_name: peakload\n"
        f"    static_configs:\n      - targets: [{listed}]\n"
    )


@contextlib.contextmanager
def start_prometheus(targets: list[str], interval_s: float = 0.2) -> Iterator[PrometheusServer]:
    """Prometheus scraping `targets` ("127.0.0.1:PORT") every `interval_s`, until the block
    ends (then SIGTERM, SIGKILL after 10 s, and its data dir removed). The block begins once
    every target has had its first scrape (answered or not): Prometheus hands new targets to
    its scrape loops up to 5 s after it is ready, and a run that begins and ends inside those
    seconds would never be seen in flight."""
    binary = prometheus_binary()
    top = Path(tempfile.mkdtemp(prefix="peakload-prom-"))
    config = top / "prometheus.yml"
    config.write_text(config_text(targets, interval_s))
    port = free_port()
    log = (top / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={top / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = PrometheusServer(proc, f"http://127.0.0.1:{port}")
    try:
        _wait_ready(server, top / "prometheus.log")
        _wait_first_scrapes(server, len(targets))
        yield server
    finally:
        stop_process(proc, 10.0)
        log.close()
        shutil.rmtree(top, ignore_errors=True)


def _wait_ready(server: PrometheusServer, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/-/ready", timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"prometheus not ready within {START_TIMEOUT_S} s")


NEVER_SCRAPED = "0001-01-01T00:00:00Z"  # an active target's lastScrape before its first


def _wait_first_scrapes(server: PrometheusServer, targets: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        r = httpx.get(f"{server.url}/api/v1/targets", timeout=10).json()
        active = r["data"]["activeTargets"]
        if len(active) == targets and all(t["lastScrape"] != NEVER_SCRAPED for t in active):
            return
        time.sleep(0.1)
    raise RuntimeError(f"prometheus did not scrape its targets within {START_TIMEOUT_S} s")
