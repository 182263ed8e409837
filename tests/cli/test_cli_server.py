"""The CLI tests' command runner (tests/support/cli.py): a command forked from its server
answers as the same command in a fresh interpreter does (exit code, stdout, stderr), with the
caller's environment, directory and stdin, and a timeout kills it."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import cli
from tests.support.cli import PEAKLOAD, run_peakload
from tests.support.ports import free_port


def fresh(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PEAKLOAD, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["run", "--no-such-option"],
        ["run", "missing.toml"],  # relative: the caller's directory
        ["run", "bad.toml"],
        ["runs"],  # the store named by the caller's environment refuses
        ["presets", "show", "vllm"],
    ],
    ids=["help", "bad-option", "missing-spec", "bad-spec", "store-refused", "preset"],
)
def test_a_forked_command_answers_as_a_fresh_interpreter_does(
    args: list[str], tmp_path: Path
) -> None:
    (tmp_path / "bad.toml").write_text('name = "x"\n[load]\nconcurrency = [0]\n')
    env = {
        **os.environ,
        "PEAKLOAD_DATABASE_URL": f"postgresql://peakload@127.0.0.1:{free_port()}/none",
        "PEAKLOAD_HOME": str(tmp_path / "home"),
        "COLUMNS": "100",
    }
    forked = run_peakload(args, env=env, cwd=tmp_path, timeout=120)
    expected = fresh(args, env, tmp_path)
    # a usage line names the program as Python started it, the module path in both
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        expected.returncode,
        expected.stdout,
        expected.stderr,
    )
    assert "Traceback" not in forked.stderr


def test_a_forked_command_reads_the_callers_stdin_and_is_killed_on_timeout(
    tmp_path: Path,
) -> None:
    """`users add` asks for the password only on a terminal: a pipe for stdin gets its
    refusal, a terminal its prompt (and the wait for an answer, ended by the timeout)."""
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": f"postgresql://u@127.0.0.1:{free_port()}/n"}
    args = ["users", "add", "tess", "--role", "viewer"]
    read, write = os.pipe()
    os.close(write)
    try:
        piped = run_peakload(args, env=env, cwd=tmp_path, stdin=read)
    finally:
        os.close(read)
    assert piped.returncode == 2 and "no terminal" in piped.stderr, piped.stderr
    master, terminal = pty.openpty()
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired) as waited:
            run_peakload(args, env=env, cwd=tmp_path, stdin=terminal, timeout=3)
    finally:
        os.close(terminal)
        os.close(master)
    assert "no terminal" not in str(waited.value.stderr)
    assert time.monotonic() - started < 30
    # and the server goes on serving the next command
    assert run_peakload(["--help"]).returncode == 0


def test_the_server_is_a_child_of_the_test_process_and_its_commands_children_of_it() -> None:
    run_peakload(["--help"])
    server = cli._the_server().proc
    assert server.poll() is None
    with open(f"/proc/{server.pid}/stat") as stat:
        assert int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    assert sys.executable in Path(f"/proc/{server.pid}/cmdline").read_text().split("\0")[0]
