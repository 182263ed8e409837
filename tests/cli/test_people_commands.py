"""`peakload users`, `tag`, `note`, `runs --owner/--preset/--tag` and `run --owner` against a
real store: one clear error for each bad input (unknown role, duplicate user, a password given
nowhere, an unknown run), and a password read from a real terminal (a pty), never an argument."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from analysis.verdicts.exitcodes import Exit
from tests.support.cli import run_peakload
from tests.support.people import make_people_runs
from ui.cli import cli
from workers.store import users

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_store(plain_url: str, fresh_database: object) -> Iterator[str]:
    db = fresh_database(plain_url)  # type: ignore[operator]
    yield str(db.url)


def peakload(url: str, *args: str, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"PEAKLOAD_DATABASE_URL": url, **env})


def one_error(r: Result, code: int, text: str) -> None:
    assert r.exit_code == code, (r.exit_code, r.output, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and text in lines[0], r.stderr
    assert "Traceback" not in r.output + r.stderr


def usage_error(r: Result, text: str) -> None:
    """click's own form for a bad option: usage, then one `Error:` line; exit 2."""
    assert r.exit_code == Exit.BAD_INPUT, (r.exit_code, r.output, r.stderr)
    assert r.stderr.strip().splitlines()[-1].startswith(f"Error: {text}"), r.stderr
    assert "Traceback" not in r.output + r.stderr


def test_users_commands_and_their_errors(one_store: str) -> None:
    env = {"PL_TEST_PW": "first-password-1"}
    added = peakload(
        one_store, "users", "add", "rune", "--role", "runner", "--password-env", "PL_TEST_PW", **env
    )
    assert added.exit_code == 0 and "user rune added (runner)" in added.output, added.stderr
    one_error(
        peakload(
            one_store,
            "users",
            "add",
            "rune",
            "--role",
            "viewer",
            "--password-env",
            "PL_TEST_PW",
            **env,
        ),
        Exit.BAD_INPUT,
        "peakload users add: user 'rune' already exists",
    )
    bad_role = peakload(
        one_store, "users", "add", "bob", "--role", "boss", "--password-env", "PL_TEST_PW", **env
    )
    usage_error(bad_role, "Invalid value for '--role': 'boss' is not one of 'viewer', 'runner'")
    one_error(
        peakload(
            one_store, "users", "add", "bob", "--role", "viewer", "--password-env", "PL_UNSET_VAR"
        ),
        Exit.BAD_INPUT,
        "--password-env PL_UNSET_VAR: that environment variable is not set or empty",
    )
    one_error(  # no terminal to prompt at (CliRunner's stdin is not a tty)
        peakload(one_store, "users", "add", "bob", "--role", "viewer"),
        Exit.BAD_INPUT,
        "no terminal to ask the password at",
    )
    one_error(
        peakload(
            one_store,
            "users",
            "add",
            "bob",
            "--role",
            "viewer",
            "--password-env",
            "SHORT",
            SHORT="abc",
        ),
        Exit.BAD_INPUT,
        "at least 8 characters",
    )
    assert "password" not in {o.name for o in users_add_params()}  # never an argument
    sso = peakload(one_store, "users", "add", "olga@example.org", "--role", "viewer", "--oidc-only")
    assert sso.exit_code == 0, sso.stderr
    listed = peakload(one_store, "users", "list", "--format", "plain")
    assert listed.exit_code == 0
    rows = [line.split("\t")[:3] for line in listed.output.strip().splitlines()]
    assert rows == [
        ["name", "role", "sign-in"],
        ["olga@example.org", "viewer", "oidc"],
        ["rune", "runner", "password"],
    ]
    assert peakload(one_store, "users", "set-role", "rune", "admin").exit_code == 0
    one_error(
        peakload(one_store, "users", "set-role", "nobody", "admin"),
        Exit.BAD_INPUT,
        "no user 'nobody'",
    )
    changed = peakload(
        one_store,
        "users",
        "set-password",
        "rune",
        "--password-env",
        "PL_TEST_PW",
        PL_TEST_PW="second-password-2",
    )
    assert changed.exit_code == 0, changed.stderr
    with psycopg.connect(one_store) as conn:
        assert users.authenticate(conn, "rune", "second-password-2") == "admin"
        assert users.authenticate(conn, "rune", "first-password-1") is None
    assert peakload(one_store, "users", "remove", "olga@example.org").exit_code == 0
    one_error(
        peakload(one_store, "users", "remove", "olga@example.org"),
        Exit.BAD_INPUT,
        "no user 'olga@example.org'",
    )


def users_add_params() -> list[object]:
    from ui.commands.users import add

    return list(add.params)


def test_tag_note_and_the_runs_filters(one_store: str) -> None:
    ids = make_people_runs(one_store)
    tagged = peakload(one_store, "tag", ids["pp-vllm"][:8], "baseline", "--by", "ada")
    assert tagged.exit_code == 0 and "tagged baseline" in tagged.output, tagged.stderr
    assert "already tagged" in peakload(one_store, "tag", "pp-vllm", "baseline").output
    one_error(peakload(one_store, "tag", "pp-vllm", "two words"), Exit.BAD_INPUT, "is not a tag")
    one_error(
        peakload(one_store, "tag", "no-such-run", "x"), Exit.MISSING, "no run matches 'no-such-run'"
    )
    noted = peakload(
        one_store, "note", "pp-vllm", "TPOT doubled after the driver update", "--by", "ada"
    )
    assert noted.exit_code == 0 and "note 1 added" in noted.output, noted.stderr
    one_error(peakload(one_store, "note", "pp-vllm", "  "), Exit.BAD_INPUT, "the note is empty")
    bad_by = peakload(one_store, "note", "pp-vllm", "x", "--by", "bad name")
    usage_error(bad_by, "Invalid value for --by: 'bad name' is not a user name")
    plain = peakload(one_store, "runs", "--tag", "baseline", "--format", "plain")
    lines = plain.output.strip().splitlines()
    header = lines[0].split("\t")
    assert len(lines) == 2 and lines[1].split("\t")[header.index("tags")] == "baseline", (
        plain.output
    )
    by_rune = peakload(one_store, "runs", "--owner", "rune", "--format", "plain").output
    assert sorted(x.split("\t")[1] for x in by_rune.strip().splitlines()[1:]) == [
        "pp-llama-new",
        "pp-llama-old",
    ]
    by_preset = peakload(
        one_store, "runs", "--preset", "llamacpp", "--model", "smollm2", "--format", "plain"
    ).output
    assert len(by_preset.strip().splitlines()) == 3
    untag = peakload(one_store, "tag", "pp-vllm", "baseline", "--remove")
    assert untag.exit_code == 0 and "removed" in untag.output
    assert (
        len(
            peakload(one_store, "runs", "--tag", "baseline", "--format", "plain")
            .output.strip()
            .splitlines()
        )
        == 1
    )


def _tty_child() -> None:  # the child's stdin (a pty) becomes its controlling terminal
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_users_add_reads_the_password_from_a_terminal(one_store: str, tmp_path: Path) -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": one_store, "PEAKLOAD_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ui", "users", "add", "tess", "--role", "viewer"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ROOT,
        preexec_fn=_tty_child,
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    answered = 0
    while proc.poll() is None and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        prompts = seen.count(b"Password:") + seen.count(b"Repeat for confirmation:")
        while answered < prompts:
            os.write(master, b"terminal-pw-42\n")
            answered += 1
    proc.wait(timeout=30)
    os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")
    assert b"terminal-pw-42" not in seen  # hidden: not echoed
    with psycopg.connect(one_store) as conn:
        assert users.authenticate(conn, "tess", "terminal-pw-42") == "viewer"


def test_run_keeps_who_launched_it(sim: object, one_store: str, tmp_path: Path) -> None:
    """`peakload run --owner NAME` stores NAME; without it, the OS user running the command
    (ui.people.owner_option, what `run` and `submit` call; one run only: each costs seconds)."""
    import getpass

    from ui.people import owner_option

    base_url = getattr(sim, "base_url")  # noqa: B009 - a SimProcess
    spec = tmp_path / "owned.toml"
    spec.write_text(
        f'name = "owned"\n[target]\napi = "openai-chat"\nbase_url = "{base_url}"\nmodel = "m"\n'
        "[workload]\nprompt_tokens = 8\noutput_tokens = 4\n"
        "[load]\nconcurrency = [1]\nduration_s = 0.5\n"
        "[validity]\nmax_loop_lag_p99_ms = 1e6\nmax_dispatch_delay_p99_ms = 1e6\n"
        "max_cpu_percent = 1e6\nmax_load_shortfall = 0.99\n"
    )
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": one_store, "PEAKLOAD_HOME": str(tmp_path)}
    done = run_peakload(
        ["run", str(spec), "--quiet", "--no-probe", "--owner", "rune"], env=env, timeout=120
    )
    assert done.returncode in (Exit.PASSED, Exit.UNDECIDABLE), done.stderr
    bad = run_peakload(["run", str(spec), "--owner", "two words"], env=env, timeout=60)
    assert bad.returncode == Exit.BAD_INPUT and "is not a user name" in bad.stderr
    with psycopg.connect(one_store) as conn:
        rows = conn.execute("SELECT launched_by FROM runs ORDER BY created_at").fetchall()
    assert [r[0] for r in rows] == ["rune"]
    assert owner_option(None) == getpass.getuser()


def test_peakload_ui_counts_users_as_a_login(
    one_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond localhost `peakload ui` starts when the store has users (ui/commands/ui.py)."""
    from ui import auth
    from ui.commands.ui import _user_count

    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", one_store)
    assert _user_count() == 0 and auth.auth_configured({}, {}, _user_count()) is None
    with psycopg.connect(one_store) as conn:
        users.add_user(conn, "ops", "admin", None)
    assert _user_count() == 1 and auth.auth_configured({}, {}, _user_count()) == "users"
