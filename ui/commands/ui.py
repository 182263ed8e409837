"""`peakload ui [--host H] [--port P]`: the Streamlit app (ui/app.py) against the configured
store. Beyond localhost it refuses to start unless a login is configured (ui/auth.py), and
tells the app to require it. The store URL reaches the app through `PEAKLOAD_DATABASE_URL`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import PeakloadError
from ui import auth

APP = Path(__file__).resolve().parents[1] / "app.py"
EXIT_REFUSED = Exit.BAD_INPUT  # refused (no login beyond localhost) or no store configured


def streamlit_command(host: str, port: int) -> list[str]:
    """The `streamlit run` command line: headless, no usage statistics, bound to host:port."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "viewer",
    ]


def ui_environment(host: str, environ: dict[str, str], store_url: str) -> dict[str, str]:
    """The app's environment: the store URL, and the login forced on beyond localhost."""
    env = dict(environ)
    env["PEAKLOAD_DATABASE_URL"] = store_url
    if not auth.is_local_host(host):
        env[auth.REQUIRE_ENV] = "1"
    return env


def _user_count() -> int:
    """Users in the configured store (ui/auth.py: users are a login method); 0 when the store
    cannot be read (its error is then shown when the command reads it again below), and for the
    embedded store when it is not running (this check never starts a server)."""
    import psycopg

    from workers.store import connect, embedded
    from workers.store.users import count_users

    embedded_only = not os.environ.get(connect.DATABASE_ENV, "").strip()
    if embedded_only and embedded.read_running(embedded.default_datadir()) is None:
        return 0
    try:
        with connect.connect_store(autocommit=True) as conn:
            return count_users(conn)
    except (PeakloadError, psycopg.Error):
        return 0


@click.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535))
def ui_command(host: str, port: int) -> None:
    """Serve the web app: runs, percentile curves, comparisons, SLA verdicts, live runs."""
    environ = dict(os.environ)
    if not auth.is_local_host(host) or environ.get(auth.REQUIRE_ENV) == "1":
        try:
            secrets = auth.read_secrets()
            method = auth.auth_configured(secrets, environ) or auth.auth_configured(
                secrets, environ, _user_count()
            )
            auth.oidc_default_role(secrets)  # a bad role refused now, not at the first sign-in
        except (ValueError, OSError) as exc:
            click.echo(f"peakload ui: {exc}", err=True)
            sys.exit(EXIT_REFUSED)
        if method is None:
            click.echo(
                f"peakload ui: refusing to serve on {host}, beyond localhost, without a login. "
                f"Add users (`peakload users add NAME --role R`), or set {auth.PASSWORD_ENV}, "
                "or `[peakload] password_sha256` (or OIDC `[auth]`) in .streamlit/secrets.toml; "
                "or use --host 127.0.0.1.",
                err=True,
            )
            sys.exit(EXIT_REFUSED)
    from workers.store.connect import database_url, redact_url

    try:
        url = database_url()
    except PeakloadError as exc:
        click.echo(f"peakload ui: {exc}", err=True)
        sys.exit(Exit.BAD_INPUT)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"peakload ui: http://{shown}:{port}  (store {redact_url(url)})", err=True)
    cmd = streamlit_command(host, port)
    # exec, not a child: signals to `peakload ui` reach the server itself
    os.execve(cmd[0], cmd, ui_environment(host, environ, url))  # noqa: S606
