"""People in the store (`users`, deploy/sql/0230): names, roles and scrypt password hashes
(workers/store/passwords.py), and what each role may do. Each write commits its own change.

Roles nest: a viewer reads every page; a runner also launches runs and tags and annotates them;
an admin also manages users. `UserError` is every refusal here, one message a person can act on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from loadgen.errors import PeakloadError
from workers.store import passwords

ROLES = ("viewer", "runner", "admin")  # in order: each may do what the one before it may
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")  # also fits an e-mail (OIDC)


class UserError(PeakloadError):
    """A user that does not exist, already exists, a bad name, role or password."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: str
    has_password: bool  # False: signs in through the OIDC provider only
    created_at: datetime
    updated_at: datetime


def rank(role: str) -> int:
    """0 viewer, 1 runner, 2 admin; -1 for anything else (which may do nothing)."""
    return ROLES.index(role) if role in ROLES else -1


def may_launch(role: str) -> bool:
    return rank(role) >= rank("runner")


def may_annotate(role: str) -> bool:
    """Tag and annotate runs: what a runner may do."""
    return rank(role) >= rank("runner")


def may_manage_users(role: str) -> bool:
    return rank(role) >= rank("admin")


def check_role(role: str) -> str:
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    return role


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise UserError(
            f"{name!r} is not a user name: 1 to 128 of letters, digits and . _ @ + -, "
            "starting with a letter or digit"
        )
    return name


def _commit(conn: psycopg.Connection[Any]) -> None:
    if not conn.autocommit:
        conn.commit()


def add_user(conn: psycopg.Connection[Any], name: str, role: str, password: str | None) -> None:
    """A new user; `password` None makes an OIDC-only user. UserError when the name is taken or
    the name, role or password is refused (nothing written then)."""
    check_name(name)
    check_role(role)
    try:
        digest = None if password is None else passwords.hash_password(password)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    row = conn.execute(
        "INSERT INTO users (name, role, password_hash) VALUES (%s, %s, %s) "
        "ON CONFLICT (name) DO NOTHING RETURNING name",
        (name, role, digest),
    ).fetchone()
    _commit(conn)
    if row is None:
        raise UserError(
            f"user {name!r} already exists (change its role with `peakload users set-role`, "
            "its password with `peakload users set-password`)"
        )


def _changed(conn: psycopg.Connection[Any], name: str, query: str, params: tuple[Any, ...]) -> None:
    row = conn.execute(query, params).fetchone()
    _commit(conn)
    if row is None:
        raise UserError(f"no user {name!r} (see `peakload users list`)")


def set_role(conn: psycopg.Connection[Any], name: str, role: str) -> None:
    check_role(role)
    _changed(
        conn,
        name,
        "UPDATE users SET role = %s, updated_at = now() WHERE name = %s RETURNING name",
        (role, name),
    )


def set_password(conn: psycopg.Connection[Any], name: str, password: str | None) -> None:
    """A new password (None: OIDC sign-in only from now on)."""
    try:
        digest = None if password is None else passwords.hash_password(password)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _changed(
        conn,
        name,
        "UPDATE users SET password_hash = %s, updated_at = now() WHERE name = %s RETURNING name",
        (digest, name),
    )


def remove_user(conn: psycopg.Connection[Any], name: str) -> None:
    """Delete the user; the runs they launched keep their name in `launched_by`."""
    _changed(conn, name, "DELETE FROM users WHERE name = %s RETURNING name", (name,))


def list_users(conn: psycopg.Connection[Any]) -> list[User]:
    rows = conn.execute(
        "SELECT name, role, password_hash IS NOT NULL, created_at, updated_at "
        "FROM users ORDER BY name"
    ).fetchall()
    _commit(conn)
    return [User(str(n), str(r), bool(p), c, u) for n, r, p, c, u in rows]


def count_users(conn: psycopg.Connection[Any]) -> int:
    """How many users exist (0: the UI falls back to its single password, ui/auth.py)."""
    row = conn.execute("SELECT count(*) FROM users").fetchone()
    _commit(conn)
    return int(row[0]) if row else 0


def role_of(conn: psycopg.Connection[Any], name: str) -> str | None:
    """The user's role, None when there is no such user (an OIDC identity not added)."""
    row = conn.execute("SELECT role FROM users WHERE name = %s", (name,)).fetchone()
    _commit(conn)
    return None if row is None else str(row[0])


def authenticate(conn: psycopg.Connection[Any], name: str, password: str) -> str | None:
    """The user's role when `password` is theirs; None otherwise: unknown name, OIDC-only user
    or wrong password all take one verification's time and give the same answer. A hash made
    with older parameters is upgraded on success."""
    row = conn.execute("SELECT role, password_hash FROM users WHERE name = %s", (name,)).fetchone()
    _commit(conn)
    if row is None or row[1] is None:
        passwords.burn_time(password)
        return None
    role, stored = str(row[0]), str(row[1])
    if not passwords.verify_password(password, stored):
        return None
    if passwords.needs_rehash(stored):
        try:
            fresh = passwords.hash_password(password)
        except ValueError:  # set under an older password rule: still accepted as it is
            return role
        conn.execute(
            "UPDATE users SET password_hash = %s WHERE name = %s AND password_hash = %s",
            (fresh, name, stored),
        )
        _commit(conn)
    return role
