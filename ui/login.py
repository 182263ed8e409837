"""The login gate of the app (the rules: ui/auth.py). `gate()` shows the sign-in and returns None
until the visitor is known, then their `Visitor` (ui/people.py): who, with which role, signed in
how. Nothing of the store is shown before; only the number of users is read, to choose the form.

- The store has users: a name and password form (scrypt, workers/store/passwords.py), and the
  OIDC button too where `[auth]` is configured; an OIDC identity takes its `users` row's role,
  else `[peakload] oidc_default_role` (viewer). The role is read again on every page view.
- No users: OIDC if configured, else the single shared password, else (localhost only) open.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
import streamlit as st

from loadgen.errors import PeakloadError
from ui import auth
from ui.data import people as data
from ui.people import Visitor, open_visitor

WRONG_LOGIN = "Wrong name or password."
WRONG_PASSWORD = "Wrong password."  # noqa: S105 - a message


def _secrets() -> dict[str, Any]:
    try:
        return {k: st.secrets[k] for k in st.secrets}
    except (FileNotFoundError, KeyError, st.errors.StreamlitSecretNotFoundError):
        return {}


def _log_out() -> None:
    st.session_state.pop(auth.SESSION_KEY, None)


def _signed_in(visitor: Visitor) -> Visitor:
    if visitor.how == "open":
        st.sidebar.caption("Open on localhost: no users yet, so no login")
        return visitor
    who = visitor.name or "shared password"
    st.sidebar.caption(f"Signed in as **{who}** ({visitor.role})")
    if visitor.how == "oidc":
        st.sidebar.button("Log out", on_click=st.logout)
    else:
        st.sidebar.button("Log out", on_click=_log_out)
    return visitor


def gate() -> Visitor | None:
    """The visitor once signed in (or when no login is needed), else None after drawing the
    sign-in. Call before any page."""
    try:
        count = data.user_count()
    except (PeakloadError, psycopg.Error) as exc:  # no page can be shown without the store
        st.title("peakload")
        st.error(f"The store cannot be read, so nobody can log in: {exc}")
        return None
    if not auth.auth_required(st.get_option("server.address"), user_count=count):
        return _signed_in(open_visitor())
    secrets = _secrets()
    oidc = auth.oidc_configured(secrets)
    if oidc and st.user.is_logged_in:
        return _oidc_visitor(secrets)
    kept = st.session_state.get(auth.SESSION_KEY)
    if isinstance(kept, Visitor) and (kept.how == "user") == (count > 0):
        if kept.how != "user":
            return _signed_in(kept)
        role = data.role_of(kept.name or "")
        if role is not None:  # removed meanwhile: signed out
            return _signed_in(Visitor(kept.name, role, "user"))
        _log_out()
    st.title("peakload")
    if count > 0:
        _user_form(oidc)
        return None
    if oidc:
        st.write("Sign in to see stored runs.")
        st.button("Log in", on_click=st.login, type="primary")
        return None
    digest = auth.password_digest(secrets, os.environ)
    if digest is None:
        st.error(
            "This server is reachable beyond localhost and has no login configured: add users "
            f"(`peakload users add`), or set {auth.PASSWORD_ENV}, `[peakload] password_sha256` "
            "or `[auth]` in .streamlit/secrets.toml."
        )
        return None
    with st.form("login"):
        given = st.text_input("Password", type="password")
        submitted = st.form_submit_button("Log in", type="primary")
    if submitted:
        if auth.password_ok(given, digest):
            st.session_state[auth.SESSION_KEY] = Visitor(
                None, auth.SHARED_PASSWORD_ROLE, "password"
            )
            st.rerun()
        st.error(WRONG_PASSWORD)
    return None


def _user_form(oidc: bool) -> None:
    with st.form("login"):
        name = st.text_input("Name", key="login_name")
        given = st.text_input("Password", type="password", key="login_password")
        submitted = st.form_submit_button("Log in", type="primary")
    if oidc:
        st.button("Log in with your organisation", on_click=st.login, key="login_oidc")
    if submitted:
        role = data.authenticate(name.strip(), given) if name.strip() and given else None
        if role is not None:
            st.session_state[auth.SESSION_KEY] = Visitor(name.strip(), role, "user")
            st.rerun()
        st.error(WRONG_LOGIN)


def _oidc_visitor(secrets: dict[str, Any]) -> Visitor | None:
    identity = auth.oidc_identity(dict(st.user.to_dict()))
    if identity is None:
        st.error("The sign-in gave neither an e-mail nor a subject: ask an admin.")
        st.button("Log out", on_click=st.logout)
        return None
    try:
        fallback = auth.oidc_default_role(secrets)
    except ValueError as exc:
        st.error(str(exc))
        return None
    return _signed_in(Visitor(identity, data.role_of(identity) or fallback, "oidc"))


VISITOR_KEY = "visitor"  # set by ui/app.py once the gate let the visitor in


def current_visitor() -> Visitor:
    """The page's visitor (set by ui/app.py before any page runs); least privilege (a nameless
    viewer) if a page somehow runs without one."""
    kept = st.session_state.get(VISITOR_KEY)
    return kept if isinstance(kept, Visitor) else Visitor(None, "viewer", "unknown")
