"""`peakload` commands for tests: `run_peakload(args, env=..., cwd=...)` behaves as
`subprocess.run([python, "-m", "ui", *args], capture_output=True, text=True, ...)` does (a
process of its own, its exit code, its stdout and stderr, `TimeoutExpired` and a killed process
on timeout), but the process is forked from a server that has already imported the command's
modules (tests/support/cli_zygote.py), not started from nothing: about a CPU-second less per
command, and the suite runs hundreds.

One server per test process, started on first use and stopped at its exit; commands run one at
a time through it (a lock). The child's CPU time is added to the test's (tests/support/cputime.py
counts reaped children; these are the server's). `PEAKLOAD_TEST_FRESH_CLI=1` runs every command
in a fresh interpreter instead, to rule the server out when a test fails.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tests.support.cputime import add_child_cpu

PEAKLOAD = [sys.executable, "-m", "ui"]
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0


class _Server:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.cli_zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        self.sock = ours
        self.pending = b""
        self.lock = threading.Lock()
        ours.settimeout(START_TIMEOUT_S)
        if not self._line().get("ready"):
            raise RuntimeError("the peakload test server did not start")

    def _line(self) -> dict[str, Any]:
        """The server's next answer (the socket's timeout applies to each read; a timed-out
        read loses nothing: what came before stays in `pending`)."""
        while b"\n" not in self.pending:
            data = self.sock.recv(1 << 16)
            if not data:
                raise RuntimeError(f"the peakload test server ended (exit {self.proc.poll()})")
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result

    def run(
        self,
        args: list[str],
        env: Mapping[str, str],
        cwd: Path,
        timeout: float | None,
        stdin: int,
    ) -> subprocess.CompletedProcess[str]:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = json.dumps({"argv": args, "env": dict(env), "cwd": str(cwd)}).encode() + b"\n"
        with self.lock:
            try:
                socket.send_fds(self.sock, [request], [stdin, out_w, err_w])
            finally:
                os.close(out_w)
                os.close(err_w)
            self.sock.settimeout(START_TIMEOUT_S)
            pid = int(self._line()["pid"])
            outputs = _Outputs(out_r, err_r)
            self.sock.settimeout(timeout)
            try:
                ended = self._line()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self.sock.settimeout(START_TIMEOUT_S)
                add_child_cpu(float(self._line()["cpu_s"]))
                out, err = outputs.join()
                raise subprocess.TimeoutExpired(
                    [*PEAKLOAD, *args], timeout or 0.0, output=out, stderr=err
                ) from None
        add_child_cpu(float(ended["cpu_s"]))
        out, err = outputs.join()
        return subprocess.CompletedProcess([*PEAKLOAD, *args], int(ended["status"]), out, err)

    def stop(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Outputs:
    """Both pipes read to their end in threads of their own (as `communicate` does), so a
    command that fills one while the other is read cannot block."""

    def __init__(self, out_fd: int, err_fd: int) -> None:
        self.texts: dict[int, str] = {}
        self.threads = [
            threading.Thread(target=self._read, args=(fd,), daemon=True) for fd in (out_fd, err_fd)
        ]
        self.fds = (out_fd, err_fd)
        for t in self.threads:
            t.start()

    def _read(self, fd: int) -> None:
        stream: IO[str]
        with open(fd, encoding="utf-8", errors="replace") as stream:
            self.texts[fd] = stream.read()

    def join(self) -> tuple[str, str]:
        for t in self.threads:
            t.join()
        return self.texts.get(self.fds[0], ""), self.texts.get(self.fds[1], "")


_server: _Server | None = None
_server_lock = threading.Lock()


def _the_server() -> _Server:
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
            atexit.register(_server.stop)
        return _server


def run_peakload(
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float | None = None,
    stdin: int | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m ui ARGS` to its end: exit code, stdout and stderr as text. `env` is the whole
    environment (default: this process's), `stdin` a file descriptor (default: this
    process's own, as a subprocess would inherit it)."""
    full_env = dict(os.environ if env is None else env)
    if os.environ.get("PEAKLOAD_TEST_FRESH_CLI") == "1":
        return subprocess.run(
            [*PEAKLOAD, *args],
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd,
            timeout=timeout,
            stdin=stdin,
            check=False,
        )
    return _the_server().run(args, full_env, cwd, timeout, 0 if stdin is None else stdin)
