"""Who is acting: the person behind a CLI command (`--owner`, else the OS user) or a UI session
(the logged-in user), and the role they act with (workers/store/users.py says what each role
may do). Runs keep this name in `runs.launched_by`; tags and notes keep it as their author.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass

import click

from workers.store import users

OPEN_ROLE = "admin"  # a UI served to localhost with no login configured: the machine's owner


@dataclass(frozen=True, slots=True)
class Visitor:
    """A UI session's person: `name` (None on an open local server whose OS user is unknown),
    `role`, and how they signed in: "user" (a `users` row and its password), "oidc",
    "password" (the single shared password: no users exist), or "open" (localhost, no login)."""

    name: str | None
    role: str
    how: str

    @property
    def may_launch(self) -> bool:
        return users.may_launch(self.role)

    @property
    def may_annotate(self) -> bool:
        return users.may_annotate(self.role)

    @property
    def may_manage_users(self) -> bool:
        return users.may_manage_users(self.role)


def os_user() -> str | None:
    """The OS account running this process (getpass: LOGNAME, USER, … then the password
    database); None when it cannot be told."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None


def owner_option(given: str | None) -> str | None:
    """`--owner NAME` checked (a user name's shape, the `users` table's rule), else the OS user.
    The name need not be a `users` row: the CLI trusts whoever holds the store's credentials."""
    if given is None:
        return os_user()
    try:
        return users.check_name(given)
    except users.UserError as exc:
        raise click.BadParameter(str(exc), param_hint="--owner") from None


def open_visitor() -> Visitor:
    """The visitor of a UI nobody has to log in to: the OS user running the server, as admin."""
    return Visitor(os_user(), OPEN_ROLE, "open")
