"""`peakload users add | list | set-role | set-password | remove`: the people who may log in to
the UI and what each may do (workers/store/users.py: viewer, runner, admin). A password is read
from a prompt (asked twice) or from the variable `--password-env` names; never from an argument,
which would land in shell history and in every process listing. Once a user exists, the UI asks
for a user's name and password and its single shared password no longer opens it (ui/auth.py).

These commands trust whoever holds the store's credentials (as every command does).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from analysis.verdicts.exitcodes import Exit
from ui.commands.store_refs import analysis_store
from ui.output import FORMATS, plain_line, stdout_console
from workers.store import users

ROLE = click.Choice(users.ROLES)


def _fail(message: str, code: int = Exit.BAD_INPUT) -> NoReturn:
    click.echo(f"peakload users {click.get_current_context().info_name}: {message}", err=True)
    sys.exit(code)


def _password(env_name: str | None) -> str:
    """From the environment variable named, else a hidden prompt asked twice."""
    if env_name is not None:
        value = os.environ.get(env_name)
        if not value:
            _fail(f"--password-env {env_name}: that environment variable is not set or empty")
        return value
    if not sys.stdin.isatty():
        _fail("no terminal to ask the password at: use --password-env VAR")
    return str(click.prompt("Password", hide_input=True, confirmation_prompt=True))


@click.group("users")
def users_group() -> None:
    """People who may log in to the UI: viewer (reads), runner (also launches, tags and notes
    runs), admin (also manages users)."""


PASSWORD_ENV_HELP = "read the password from this environment variable (else: a prompt)"  # noqa: S105


@users_group.command("add")
@click.argument("name")
@click.option("--role", type=ROLE, required=True, help="viewer, runner or admin")
@click.option("--password-env", metavar="VAR", help=PASSWORD_ENV_HELP)
@click.option(
    "--oidc-only",
    is_flag=True,
    help="no password: NAME (the e-mail the provider gives) signs in through OIDC only",
)
def add(name: str, role: str, password_env: str | None, oidc_only: bool) -> None:
    """Add user NAME with a role and a password."""
    try:
        users.check_name(name)
    except users.UserError as exc:
        _fail(str(exc))
    if oidc_only and password_env:
        _fail("--oidc-only and --password-env exclude each other")
    password = None if oidc_only else _password(password_env)
    try:
        with analysis_store() as conn:
            users.add_user(conn, name, role, password)
    except users.UserError as exc:
        _fail(str(exc))
    click.echo(f"user {name} added ({role}{', OIDC sign-in only' if oidc_only else ''})")


@users_group.command("list")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def list_(fmt: str) -> None:
    """Every user, with role and sign-in method."""
    with analysis_store() as conn:
        found = users.list_users(conn)
    header = ("name", "role", "sign-in", "created (UTC)", "changed (UTC)")
    rows = [
        (
            u.name,
            u.role,
            "password" if u.has_password else "oidc",
            f"{u.created_at:%Y-%m-%d %H:%M:%S}",
            f"{u.updated_at:%Y-%m-%d %H:%M:%S}",
        )
        for u in found
    ]
    if fmt == "json":
        import json

        for r in rows:
            sys.stdout.write(json.dumps(dict(zip(header, r, strict=True))) + "\n")
        return
    if fmt == "plain":
        sys.stdout.write("\n".join(plain_line(r) for r in [header, *rows]) + "\n")
        return
    from rich.table import Table

    t = Table(title=f"{len(rows)} user(s)")
    for col in header:
        t.add_column(col)
    for r in rows:
        t.add_row(*r)
    stdout_console().print(t)


@users_group.command("set-role")
@click.argument("name")
@click.argument("role", type=ROLE)
def set_role(name: str, role: str) -> None:
    """Give user NAME another ROLE (viewer, runner or admin)."""
    try:
        with analysis_store() as conn:
            users.set_role(conn, name, role)
    except users.UserError as exc:
        _fail(str(exc))
    click.echo(f"user {name} is now {role}")


@users_group.command("set-password")
@click.argument("name")
@click.option("--password-env", metavar="VAR", help=PASSWORD_ENV_HELP)
def set_password(name: str, password_env: str | None) -> None:
    """Give user NAME a new password."""
    with analysis_store() as conn:
        if users.role_of(conn, name) is None:
            _fail(f"no user {name!r} (see `peakload users list`)")
        password = _password(password_env)
        try:
            users.set_password(conn, name, password)
        except users.UserError as exc:
            _fail(str(exc))
    click.echo(f"user {name}: password changed")


@users_group.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove user NAME (the runs they launched keep their name)."""
    try:
        with analysis_store() as conn:
            users.remove_user(conn, name)
    except users.UserError as exc:
        _fail(str(exc))
    click.echo(f"user {name} removed")
