"""Where the store is and how to open it: `PEAKLOAD_DATABASE_URL`, else the embedded PostgreSQL.
The first connection to a database in a process migrates it and switches on what its server
allows. URLs are printed only through `redact_url`.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from loadgen.errors import StoreError
from loadgen.results import storeformat
from loadgen.results.storeformat import PREPARE_THRESHOLD
from workers.store import embedded, features, migrate

DATABASE_ENV = storeformat.DATABASE_ENV
EMBEDDED_DBNAME = "peakload"
CONNECT_TIMEOUT_S = 10

_SECRET_KEYS = {"password", "sslpassword", "passfile", "sslkey"}
_KV_SECRET = re.compile(r"\b(password|sslpassword)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.I)

_migrated: set[str] = set()
_migrated_lock = threading.Lock()


def redact_url(url: str) -> str:
    """The URL with any password (in the userinfo or the query) replaced by `***`; key=value
    DSNs are handled too. Safe to print or log."""
    if "://" not in url:
        return _KV_SECRET.sub(lambda m: f"{m.group(1)}=***", url)
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, hostport = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostport}" if ":" in userinfo else f"{user}@{hostport}"
        query = urlencode(
            [(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in parse_qsl(parts.query)],
            safe="/*",
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparseable database URL>"


def database_url() -> str:
    """`PEAKLOAD_DATABASE_URL` if set, else the embedded store's URL (starting it if needed)."""
    url = os.environ.get(DATABASE_ENV, "").strip()
    if url:
        return url
    server = embedded.ensure_running()
    _ensure_database(server.url("postgres"), EMBEDDED_DBNAME)
    return server.url(EMBEDDED_DBNAME)


def pg_connect(
    url: str,
    *,
    autocommit: bool = False,
    connect_timeout: int = CONNECT_TIMEOUT_S,
    **params: str | int,
) -> psycopg.Connection[Any]:
    """A connection to `url` as every peakload worker and command opens one: no server-side
    prepared statements (storeformat.PREPARE_THRESHOLD), so it works through a transaction-mode
    pooler. `params`: further libpq parameters. Raises psycopg.Error."""
    return psycopg.connect(
        make_conninfo(url, **params) if params else url,
        autocommit=autocommit,
        prepare_threshold=PREPARE_THRESHOLD,
        connect_timeout=connect_timeout,
    )


def _ensure_database(admin_url: str, dbname: str) -> None:
    with pg_connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if exists is None:
            # another command may create it meanwhile: a DuplicateDatabase, or when both
            # CREATEs ran at once, a UniqueViolation on pg_database
            with contextlib.suppress(
                psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation
            ):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


def open_connection(url: str, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """A plain connection (no migration); StoreError naming the redacted URL on failure."""
    try:
        return pg_connect(url, autocommit=autocommit)
    except psycopg.Error as e:
        raise StoreError(f"cannot connect to the store at {redact_url(url)}: {e}") from e


def ensure_schema(url: str, *, force: bool = False) -> features.StoreFeatures | None:
    """Migrate the database at `url` and switch on its features, once per process (unless
    `force`). Returns the features when this call did the work, else None."""
    with _migrated_lock:
        if url in _migrated and not force:
            return None
        with open_connection(url, autocommit=True) as conn:
            migrate.migrate(conn)
            found = features.ensure(conn, features.retention_days_from_env())
        _migrated.add(url)
        return found


def connect_store(url: str | None = None, *, autocommit: bool = False) -> psycopg.Connection[Any]:
    """Open the store (the default one when `url` is None), migrating it on first use."""
    url = url or database_url()
    ensure_schema(url)
    return open_connection(url, autocommit=autocommit)


def store_status(url: str | None = None) -> features.StoreFeatures:
    """Everything `peakload db status` shows: server, migrations (applied and pending), and
    features. Does not migrate."""
    url = url or database_url()
    with open_connection(url, autocommit=True) as conn:
        found = features.detect(conn, features.retention_days_from_env())
        found.migrations = [
            {"version": m.version, "name": m.name, "applied_at": m.applied_at.isoformat()}
            for m in migrate.applied(conn)
        ]
        found.pending_migrations = migrate.pending(conn)
    return found
