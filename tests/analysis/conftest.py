"""Stores for the analysis tests: the session's embedded PostgreSQL server (plain
PostgreSQL, schema from deploy/sql/), and TimescaleDB when PEAKLOAD_TEST_TIMESCALE_URL is set.
Each test gets a fresh database in the server it asked for, dropped afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "deploy" / "sql"


def _fresh_db(admin_url: str) -> Iterator[psycopg.Connection[Any]]:
    name = "analysis_" + uuid.uuid4().hex[:12]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = psycopg.conninfo.make_conninfo(admin_url, dbname=name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for f in sorted(SCHEMA_DIR.glob("*.sql")):
                conn.execute(f.read_text())
            conn.peakload_url = url  # type: ignore[attr-defined]  (for CLI tests)
            yield conn
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def pg_conn(plain_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection (autocommit) to a fresh plain-PostgreSQL database with the schema."""
    yield from _fresh_db(plain_url)  # the session's embedded server (tests/support/stores.py)


@pytest.fixture
def ts_conn() -> Iterator[psycopg.Connection[Any]]:
    """A connection to a fresh TimescaleDB database with the schema; skipped when
    PEAKLOAD_TEST_TIMESCALE_URL is unset."""
    url = os.environ.get("PEAKLOAD_TEST_TIMESCALE_URL")
    if not url:
        pytest.skip("PEAKLOAD_TEST_TIMESCALE_URL is not set")
    yield from _fresh_db(url)
