"""Distributed-test fixtures: a private `redis-server` on a free port (killable and restartable,
for C3), the simulated engine as a subprocess, and real `celery worker` subprocesses per region
(prefork pool), each stopped afterwards. Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def wait_port(
    port: int, timeout_s: float = 15.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s} s")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL the process group after `timeout_s`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


class RedisServer:
    """A redis-server of our own (no persistence) that a test may kill and restart on the same
    port. `url(db)` gives the broker URL."""

    def __init__(self, workdir: Path) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed (deploy/local/redis.sh installs it)")
        self.exe = exe
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_port(self.port, proc=self.proc)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


class SimServer:
    """`python -m loadgen.sim` on a free port; `base_url` ends in /v1."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.sim", "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
        wait_port(self.port, 30, proc=self.proc)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        stop_process(self.proc)


class CeleryWorker:
    """One `celery worker` process (prefork pool) on one region's queue."""

    def __init__(
        self,
        region: str,
        env: dict[str, str],
        logdir: Path,
        *,
        concurrency: int = 1,
        extra_env: dict[str, str] | None = None,
        index: int = 0,
        queues: str | None = None,
    ) -> None:
        self.region = region
        self.log_path = logdir / f"worker-{region}-{index}.log"
        full_env = {**env, **(extra_env or {})}
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "workers.app",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                str(concurrency),
                "-Q",
                queues or f"region.{region}",
                "-n",
                f"{region}.{index}.{os.getpid()}@%h",
                "-E",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "info",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=REPO,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 45.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.region} exited: {self.log()[-2000:]}")
            if " ready." in self.log():
                return
            time.sleep(0.1)
        raise TimeoutError(f"worker {self.region} not ready: {self.log()[-2000:]}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool children)."""
        kids = self.children()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)
        for k in kids:
            if k.is_running():
                k.kill()

    def stop(self) -> None:
        stop_process(self.proc, 20)
        self._log.close()


class Cluster:
    """The workers of one test, sharing an environment; all stopped at teardown."""

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        self.env = env
        self.logdir = logdir
        self.workers: list[CeleryWorker] = []

    def start(
        self,
        region: str,
        *,
        concurrency: int = 1,
        extra_env: dict[str, str] | None = None,
        wait: bool = True,
        queues: str | None = None,
    ) -> CeleryWorker:
        w = CeleryWorker(
            region,
            self.env,
            self.logdir,
            concurrency=concurrency,
            extra_env=extra_env,
            index=len(self.workers),
            queues=queues,
        )
        self.workers.append(w)
        if wait:
            w.wait_ready()
        return w

    def logs(self) -> str:
        return "\n".join(w.log() for w in self.workers)

    def stop(self) -> None:
        for w in self.workers:
            w.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def sim_server() -> Iterator[SimServer]:
    """The simulated engine, fixed timing: 20 ms to the first token, 5 ms between tokens."""
    sim = SimServer("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5")
    yield sim
    sim.stop()


@pytest.fixture
def dist_store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh migrated database for one distributed test: on the test TimescaleDB when
    PEAKLOAD_TEST_TIMESCALE_URL is set (what a team deploys), else on the embedded PostgreSQL.
    One store per test, not both: these tests are long, and the store path has its own tests."""
    from tests.support.stores import TIMESCALE_ENV, FreshDatabase

    admin = os.environ.get(TIMESCALE_ENV, "").strip() or str(request.getfixturevalue("plain_url"))
    db = FreshDatabase(admin)
    yield db.url
    db.drop()


@pytest.fixture
def cluster_env(dist_store_url: str, redis_server: RedisServer) -> dict[str, str]:
    """The environment workers and the coordinator share for one test."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PEAKLOAD_")},
        "PEAKLOAD_DATABASE_URL": dist_store_url,
        "PEAKLOAD_REDIS_URL": redis_server.url(0),
        "PEAKLOAD_ALLOW_PRIVATE_TARGETS": "1",
        "PEAKLOAD_LEASE_TTL_S": "3",
        "PYTHONPATH": str(REPO),
    }


@pytest.fixture
def cluster(cluster_env: dict[str, str], tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(cluster_env, tmp_path)
    yield c
    c.stop()
