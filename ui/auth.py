"""Who may see the app. Served beyond localhost it requires a login: Streamlit's OIDC (`[auth]`
in .streamlit/secrets.toml) or a password (`[peakload] password_sha256` in the secrets, or the
`PEAKLOAD_UI_PASSWORD` environment variable). On 127.0.0.1/::1/localhost it may run open.
`auth_configured` is what `peakload ui` checks before it starts a public server.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PASSWORD_ENV = "PEAKLOAD_UI_PASSWORD"  # noqa: S105 - a variable name
REQUIRE_ENV = "PEAKLOAD_UI_REQUIRE_AUTH"
SESSION_KEY = "peakload_authenticated"
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_local_host(host: str | None) -> bool:
    """True for a loopback address or `localhost`; False for unset (Streamlit then listens on
    every interface), 0.0.0.0, :: and anything else."""
    if not host:
        return False
    h = host.strip().strip("[]").lower()
    if h in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def secrets_files(cwd: Path | None = None) -> list[Path]:
    """Where Streamlit reads secrets from: ~/.streamlit/ then ./.streamlit/ (later wins)."""
    base = cwd or Path.cwd()
    return [Path.home() / ".streamlit" / "secrets.toml", base / ".streamlit" / "secrets.toml"]


def read_secrets(files: list[Path] | None = None) -> dict[str, Any]:
    """The merged secrets TOML (top-level tables merged, later files win); {} if none."""
    out: dict[str, Any] = {}
    for f in files if files is not None else secrets_files():
        if f.is_file():
            with f.open("rb") as fh:
                out.update(tomllib.load(fh))
    return out


def oidc_configured(secrets: Mapping[str, Any]) -> bool:
    auth = secrets.get("auth")
    return (
        isinstance(auth, Mapping)
        and bool(auth.get("redirect_uri"))
        and bool(auth.get("cookie_secret"))
    )


def password_digest(secrets: Mapping[str, Any], environ: Mapping[str, str]) -> bytes | None:
    """The SHA-256 of the accepted password: from the secrets' `[peakload] password_sha256`
    (hex), else of `PEAKLOAD_UI_PASSWORD`; None when neither is set."""
    section = secrets.get("peakload")
    if isinstance(section, Mapping) and section.get("password_sha256"):
        hexd = str(section["password_sha256"]).strip().lower()
        try:
            digest = bytes.fromhex(hexd)
        except ValueError:
            raise ValueError("[peakload] password_sha256 in secrets.toml is not hex") from None
        if len(digest) != 32:
            raise ValueError("[peakload] password_sha256 in secrets.toml is not 64 hex digits")
        return digest
    pw = environ.get(PASSWORD_ENV, "")
    return hashlib.sha256(pw.encode()).digest() if pw else None


def password_ok(given: str, digest: bytes) -> bool:
    """Constant-time comparison of the given password's SHA-256 with the accepted one."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), digest)


def auth_configured(secrets: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """ "oidc" or "password" when a login method is configured, else None."""
    if oidc_configured(secrets):
        return "oidc"
    return "password" if password_digest(secrets, environ) is not None else None


def auth_required(address: str | None, environ: Mapping[str, str] | None = None) -> bool:
    """A login is needed when the server listens beyond localhost, or when forced by
    `PEAKLOAD_UI_REQUIRE_AUTH=1` (set by `peakload ui` for public hosts, and by tests)."""
    env = os.environ if environ is None else environ
    return env.get(REQUIRE_ENV, "").strip() == "1" or not is_local_host(address)


# ---------------------------------------------------------------- the gate (Streamlit)


def _streamlit_secrets() -> dict[str, Any]:
    import streamlit as st

    try:
        return {k: st.secrets[k] for k in st.secrets}
    except (FileNotFoundError, KeyError, st.errors.StreamlitSecretNotFoundError):
        return {}


def gate() -> bool:
    """Show a login (OIDC button or password form) and return False until the visitor is
    authenticated; True when no login is needed or it succeeded. Call before any page."""
    import streamlit as st

    if not auth_required(st.get_option("server.address")):
        return True
    secrets = _streamlit_secrets()
    if oidc_configured(secrets):
        if st.user.is_logged_in:
            st.sidebar.button("Log out", on_click=st.logout)
            return True
        st.title("peakload")
        st.write("Sign in to see stored runs.")
        st.button("Log in", on_click=st.login, type="primary")
        return False
    digest = password_digest(secrets, os.environ)
    if digest is None:
        st.error(
            "This server is reachable beyond localhost and has no login configured: set "
            f"{PASSWORD_ENV}, `[peakload] password_sha256` or `[auth]` in .streamlit/secrets.toml."
        )
        return False
    if st.session_state.get(SESSION_KEY):
        return True
    st.title("peakload")
    with st.form("login"):
        given = st.text_input("Password", type="password")
        submitted = st.form_submit_button("Log in", type="primary")
    if submitted:
        if password_ok(given, digest):
            st.session_state[SESSION_KEY] = True
            st.rerun()
        st.error("Wrong password.")
    return False
