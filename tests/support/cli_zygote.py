"""The server behind tests/support/cli.py: a Python process that has imported the `peakload`
command's modules once and forks a fresh process for each command a test runs.

A `python -m ui run ...` spends about a CPU-second importing (pandas, scipy, numpy, pydantic,
httpx, psycopg and the project's own modules) before it does anything; the suite runs
hundreds of them. Here each command is a child forked from this process with that done: it
gets the caller's argv, environment, working directory and standard streams (the file
descriptors themselves, passed over the socket), runs `python -m ui`'s own module with
`runpy`, and exits the way an interpreter does (SystemExit's code, a traceback and 1 for an
uncaught exception, exit handlers run, streams flushed), because it returns out of `serve`
into this module's top level and runs there.

What the child cannot share with a fresh interpreter is what happened at import: a module that
read the environment or the working directory then read this process's. The project reads
neither at import (one exception, `workers.schedules`' beat tick, is not loaded here), and
tests/cli/test_cli_table.py still runs real interpreters for what depends on imports.

The imported modules' objects are frozen out of the garbage collector (`gc.freeze`, what it is
for) before the first fork: otherwise each child's full collections walk the whole imported
heap (140k objects with pandas and scipy: 107 ms each here, where a fresh `peakload run`,
which imports those only for its summary, holds 64k while it measures: 39 ms) and copy every
page they touch. Frozen, a child's collections see only what the command made.

Protocol, one command at a time on the socket passed as argv[1]: a request is one JSON line
{"argv", "env", "cwd"} sent with three file descriptors (stdin, stdout, stderr); the answer
is a JSON line {"pid"} once forked, then {"status", "cpu_s"} (`os.waitstatus_to_exitcode`,
the child's user+system seconds) when it has ended. An empty read ends the server.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import socket
import sys
from typing import Any

# the commands the CLI tests run and the heavy libraries their summaries and reports import
# lazily; not Celery's app (`workers.app` makes it at import, its broker read from the
# environment then), not Streamlit
PRELOAD = (
    "numpy",
    "pandas",
    "scipy.stats",
    "httpx",
    "psycopg",
    "pydantic",
    "ui.cli",
    "ui.commands.run",
    "ui.commands.report",
    "ui.commands.runs",
    "ui.commands.sla",
    "ui.commands.compare",
    "ui.commands.probe",
    "ui.commands.abort",
    "ui.commands.export",
    "ui.commands.importrun",
    "ui.commands.users",
    "analysis.reports.summary",
    "analysis.reports.report",
)
MAX_FDS = 3


def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """One request and its descriptors; None when the client has gone."""
    buf = b""
    fds: list[int] = []
    while not buf.endswith(b"\n"):
        data, got, _flags, _addr = socket.recv_fds(sock, 1 << 20, MAX_FDS)
        if not data:
            for fd in got:
                os.close(fd)
            return None
        buf += data
        fds += got
    return json.loads(buf), fds


def answer(sock: socket.socket, **fields: Any) -> None:
    sock.sendall(json.dumps(fields).encode() + b"\n")


def become(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: the caller's streams, directory, environment and argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["peakload", *request["argv"]]


def serve(sock: socket.socket) -> bool:
    """Forks a child per request and reports its end; returns True in a child (which then runs
    the command at top level), False in the server when the client has gone."""
    while True:
        got = receive(sock)
        if got is None:
            return False
        request, fds = got
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            become(request, fds)
            return True
        for fd in fds:
            os.close(fd)
        answer(sock, pid=pid)
        _pid, status, usage = os.wait4(pid, 0)
        answer(
            sock,
            status=os.waitstatus_to_exitcode(status),
            cpu_s=usage.ru_utime + usage.ru_stime,
        )


if __name__ == "__main__":
    control = socket.socket(fileno=int(sys.argv[1]))
    preload()
    gc.freeze()  # see the module's docstring
    answer(control, ready=True)
    if serve(control):
        import ui

        # the command, as `python -m ui` runs it: argv[0] becomes ui/__main__.py's path (the
        # package by its module's name: a literal "ui" would read to tests/affected.py as the
        # `ui` command, the Streamlit app, named)
        runpy.run_module(ui.__name__, run_name="__main__", alter_sys=True)
