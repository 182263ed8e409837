"""Who may see the app, as configuration: the rules ui/login.py applies. A login is required
when the app is served beyond localhost (or forced), and whenever the store has users
(`peakload users`, workers/store/users.py): each then signs in with a name and password, or
through Streamlit's OIDC (`[auth]` in .streamlit/secrets.toml) where configured. Only while no
user exists do the older single shared password (`[peakload] password_sha256` in the secrets, or
`PEAKLOAD_UI_PASSWORD`) and an open localhost server still apply. `auth_configured` is what
`peakload ui` checks before it starts a public server.
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
SESSION_KEY = "peakload_visitor"  # the signed-in Visitor (ui/people.py) in session state
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


def auth_configured(
    secrets: Mapping[str, Any], environ: Mapping[str, str], user_count: int = 0
) -> str | None:
    """ "users" (the store has users), "oidc" or "password" when a login method is configured,
    else None."""
    if user_count > 0:
        return "users"
    if oidc_configured(secrets):
        return "oidc"
    return "password" if password_digest(secrets, environ) is not None else None


def auth_required(
    address: str | None, environ: Mapping[str, str] | None = None, user_count: int = 0
) -> bool:
    """A login is needed when the server listens beyond localhost, when forced by
    `PEAKLOAD_UI_REQUIRE_AUTH=1` (set by `peakload ui` for public hosts, and by tests), and
    whenever the store has users (roles mean nothing if anyone may walk in)."""
    env = os.environ if environ is None else environ
    forced = env.get(REQUIRE_ENV, "").strip() == "1"
    return forced or user_count > 0 or not is_local_host(address)


SHARED_PASSWORD_ROLE = "admin"  # noqa: S105 - a role name; the single password opens everything, as it always did
OIDC_DEFAULT_ROLE = "viewer"


def oidc_default_role(secrets: Mapping[str, Any]) -> str:
    """The role of an OIDC identity with no `users` row: `[peakload] oidc_default_role` in the
    secrets (viewer, runner or admin), else viewer. ValueError for another value."""
    from workers.store.users import ROLES

    section = secrets.get("peakload")
    role = section.get("oidc_default_role") if isinstance(section, Mapping) else None
    if role is None:
        return OIDC_DEFAULT_ROLE
    if role not in ROLES:
        raise ValueError(
            f"[peakload] oidc_default_role in secrets.toml is {role!r}: one of {', '.join(ROLES)}"
        )
    return str(role)


def oidc_identity(claims: Mapping[str, Any]) -> str | None:
    """The name an OIDC sign-in is known by: its e-mail claim (what `peakload users add` names),
    else its subject; None when the provider gave neither."""
    for key in ("email", "sub"):
        value = claims.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None
