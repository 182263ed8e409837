"""A PgBouncer of the test's own, in transaction mode in front of a test database, started and
stopped by the same script a user runs (deploy/local/pgbouncer.sh), on a free loopback port and
in the test's own directory; and the database's count of connections from clients."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.celery_workers import REPO, wait_port
from tests.support.ports import free_port

SCRIPT = REPO / "deploy" / "local" / "pgbouncer.sh"


class PgBouncer:
    """`url` is `upstream_url` through the pooler: same user, password and database."""

    def __init__(self, upstream_url: str, *, pool: int) -> None:
        if shutil.which("pgbouncer") is None and not Path("/usr/sbin/pgbouncer").exists():
            pytest.skip("pgbouncer is not installed (deploy/local/pgbouncer.sh install)")
        self.port = free_port()
        # under /tmp, not pytest's tmp_path: started by root it runs as `postgres`, which must
        # reach the directory (pytest's base directory is closed to other users)
        self.dir = Path(tempfile.mkdtemp(prefix=f"peakload-pgbouncer-{self.port}-"))
        self.env = {
            **os.environ,
            "PEAKLOAD_PGBOUNCER_DIR": str(self.dir),
            "PEAKLOAD_PGBOUNCER_POOL": str(pool),
        }
        out = subprocess.run(
            ["bash", str(SCRIPT), "start", upstream_url, str(self.port)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        self.url = out.stdout.strip()
        wait_port(self.port)

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(SCRIPT), "stop", str(self.port)],
            env=self.env,
            capture_output=True,
            timeout=30,
            check=False,
        )
        pid_file = self.dir / "pgbouncer.pid"
        end = time.monotonic() + 10
        while pid_file.exists() and time.monotonic() < end:  # it removes it on exit
            time.sleep(0.05)
        shutil.rmtree(self.dir, ignore_errors=True)


_CLIENT_BACKENDS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'"
)


def client_backends(conn: psycopg.Connection[Any], dbname: str) -> int:
    """Connections the database server holds to `dbname` from clients (PgBouncer's server
    connections, or peakload's own without a pooler). `conn`: to any database there."""
    row = conn.execute(_CLIENT_BACKENDS, (dbname,)).fetchone()
    return int(row[0]) if row else 0


class BackendWatch:
    """Samples `client_backends` every `every_s` from a thread, on a connection to the admin
    database (not counted); `peak` is the most seen."""

    def __init__(self, admin_url: str, dbname: str, every_s: float = 0.05) -> None:
        self.admin_url, self.dbname, self.every_s = admin_url, dbname, every_s
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self) -> BackendWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)

    def _main(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self._stop.is_set():
                self.peak = max(self.peak, client_backends(conn, self.dbname))
                self.samples += 1
                self._stop.wait(self.every_s)
