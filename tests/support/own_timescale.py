"""A TimescaleDB server of the test's own, beside the shared one, made by the same script that
starts that one (deploy/local/timescaledb.sh instance): the same binaries, configuration and
password, on a free loopback port. The test may stop and start it as it likes (a real restart:
every session terminated by the server, then connections refused until it is back), which it
must never do to the server every other test shares. Removed, data and all, at the end."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from tests.support.celery_workers import REPO
from tests.support.ports import free_port
from tests.support.stores import server_removed

SCRIPT = REPO / "deploy" / "local" / "timescaledb.sh"


class OwnTimescale:
    """`url`: the admin URL of the instance's `peakload_test` database, once started."""

    def __init__(self, purpose: str) -> None:
        if os.geteuid() != 0:
            pytest.skip("a TimescaleDB of the test's own is made as root (timescaledb.sh)")
        self.name = f"{purpose}-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.url = ""

    def _script(self, *args: str) -> str:
        out = subprocess.run(
            ["bash", str(SCRIPT), "instance", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, f"timescaledb.sh instance {' '.join(args)}: {out.stderr}"
        return out.stdout.strip()

    def start(self) -> str:
        """Made on the first call, started on every call; its URL."""
        self.url = self._script("start", self.name, str(self.port))
        return self.url

    def halt(self) -> None:
        """A fast shutdown: the server ends every session and stops listening."""
        self._script("halt", self.name)

    def remove(self) -> None:
        self._script("remove", self.name)
        server_removed(self.url)
