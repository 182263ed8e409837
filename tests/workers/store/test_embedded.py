"""The embedded default store: started on first use under PEAKLOAD_HOME, reused by the next
command (two commands starting at once share one server), stopped by `peakload db stop`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from workers.store import embedded

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def peakload_home() -> Iterator[Path]:
    """A data directory outside pytest's basetemp (see tests/support/stores.py)."""
    home = Path(tempfile.mkdtemp(prefix="peakload-home-"))
    yield home
    embedded.stop(home / "postgres")
    shutil.rmtree(home, ignore_errors=True)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEAKLOAD_")}
    env["PEAKLOAD_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-c", "from ui.cli import main; main()", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_commands_share_one_server_and_db_stop_stops_it(peakload_home: Path) -> None:
    code = "from workers.store import connect; print(connect.database_url())"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=REPO,
            env={**os.environ, "PEAKLOAD_HOME": str(peakload_home), "PEAKLOAD_DATABASE_URL": ""},
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]  # fmt: skip
    urls = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(urls) == 1 and "password" not in next(iter(urls))
    server = embedded.read_running(peakload_home / "postgres")
    assert server is not None and server.host is None  # Unix socket only, no TCP
    status = _cli(peakload_home, "db", "status")  # status reads, never migrates
    assert status.returncode == 0, status.stderr
    assert "migrations:  none" in status.stdout and "pending:     0001_core.sql" in status.stdout
    migrated = _cli(peakload_home, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    status = _cli(peakload_home, "db", "status")
    assert "migrations:  0001_core, 0002_timescale" in status.stdout, status.stdout
    assert "pending" not in status.stdout
    assert "timescaledb:           off" in status.stdout
    again = embedded.read_running(peakload_home / "postgres")
    assert again is not None and again.pid == server.pid  # reused, not restarted
    stop = _cli(peakload_home, "db", "stop")
    assert stop.returncode == 0 and "stopped the embedded server" in stop.stdout
    assert embedded.read_running(peakload_home / "postgres") is None
    assert "not running" in _cli(peakload_home, "db", "stop").stdout


def _as_root_without_the_user(
    monkeypatch: pytest.MonkeyPatch, lock: Path, made: list[str] | None = None
) -> None:
    """`_run_as` as root, SYSTEM_USER missing until a name is appended to `made` (never, if
    None), the user lock at `lock`."""
    names = made if made is not None else []

    def getpwnam(name: str) -> object:
        if name not in names:
            raise KeyError(name)
        return object()

    monkeypatch.setattr(embedded.os, "geteuid", lambda: 0)
    monkeypatch.setattr(embedded.pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(embedded, "_user_lock_path", lambda: lock)


def test_a_system_user_made_by_a_concurrent_start_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As root, two processes starting a server at once both find the user missing; the one
    whose `useradd` loses the race (exit 9: the name is taken) runs as the user the other made,
    where it once failed (a fresh machine's first `make test`, 15 errors at setup)."""
    made: list[str] = []

    def useradd(cmd: list[str], **_: object) -> None:
        made.append(cmd[-1])  # the other process made it first
        raise subprocess.CalledProcessError(9, cmd, stderr=f"user '{cmd[-1]}' already exists")

    _as_root_without_the_user(monkeypatch, tmp_path / "user.lock", made)
    monkeypatch.setattr(embedded.subprocess, "run", useradd)
    assert embedded._run_as() == embedded.SYSTEM_USER


def test_concurrent_starts_make_the_system_user_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As root, four processes starting servers at once on a fresh machine take turns: one
    useradd, the others find the user it made. useradd is not safe against itself (four at once
    on Debian 12 all exited 0 and the uid changed under them: 999, then 995)."""
    made: list[str] = []
    running: list[int] = []

    def useradd(cmd: list[str], **_: object) -> None:
        running.append(1)
        overlapped = len(running) > 1
        time.sleep(0.05)  # the window the real one left open
        made.append(cmd[-1])
        running.pop()
        assert not overlapped, "two useradd at once"

    _as_root_without_the_user(monkeypatch, tmp_path / "user.lock", made)
    monkeypatch.setattr(embedded.subprocess, "run", useradd)
    with ThreadPoolExecutor(4) as pool:  # flock: each open() its own lock, as processes have
        users = list(pool.map(lambda _: embedded._run_as(), range(4)))
    assert users == [embedded.SYSTEM_USER] * 4
    assert made == [embedded.SYSTEM_USER]


def test_a_lock_that_cannot_be_opened_is_a_store_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _as_root_without_the_user(monkeypatch, tmp_path / "gone" / "user.lock")
    with pytest.raises(embedded.StoreError, match=r"cannot create system user .*user\.lock"):
        embedded._run_as()


def test_a_system_user_that_cannot_be_made_is_a_store_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def useradd(cmd: list[str], **_: object) -> None:
        raise subprocess.CalledProcessError(1, cmd, stderr="useradd: cannot lock /etc/passwd")

    _as_root_without_the_user(monkeypatch, tmp_path / "user.lock")
    monkeypatch.setattr(embedded.subprocess, "run", useradd)
    with pytest.raises(embedded.StoreError, match="cannot create system user"):
        embedded._run_as()
