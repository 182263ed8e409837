"""Migrations: applied once, a second run is a no-op, concurrent migrators serialize, an edited
applied migration is refused; D4 feature detection on plain PostgreSQL and Apache TimescaleDB.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from loadgen.errors import StoreError
from tests.support.stores import FreshDatabase
from ui.commands.db import db as db_command
from workers.store import connect, features, migrate

pytestmark = pytest.mark.integration


def _tables(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, count(a.attnum) FROM pg_class c JOIN pg_attribute a "
            "ON a.attrelid = c.oid AND a.attnum > 0 JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') GROUP BY c.relname"
        ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def test_migrations_twice_are_a_no_op(store_url: str) -> None:
    before = _tables(store_url)
    assert {"runs", "run_levels", "shards", "requests", "ticks", "server_metrics"} <= set(before)
    with psycopg.connect(store_url, autocommit=True) as conn:
        first = migrate.applied(conn)
        assert [m.version for m in first] == [m.version for m in migrate.discover()]
        assert migrate.migrate(conn) == []
        assert migrate.migrate(conn) == []
        again = migrate.applied(conn)
    assert again == first  # same rows, same applied_at: nothing re-ran
    assert _tables(store_url) == before


def test_concurrent_migrators_apply_each_migration_once(
    store_admin_url: str, fresh_database: Any
) -> None:
    db: FreshDatabase = fresh_database(store_admin_url, migrate=False)
    results: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(db.url, autocommit=True) as conn:
                results.append(len(migrate.migrate(conn)))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    # each migration applied by exactly one of them (each under the lock, in order)
    assert sum(results) == len(migrate.discover()) and len(results) == 3
    with psycopg.connect(db.url, autocommit=True) as conn:
        assert migrate.pending(conn) == []


def test_an_edited_applied_migration_is_refused(
    plain_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    db: FreshDatabase = fresh_database(plain_url, migrate=False)
    sql_dir = tmp_path / "sql"
    shutil.copytree(migrate.SQL_DIR, sql_dir)
    with psycopg.connect(db.url, autocommit=True) as conn:
        assert len(migrate.migrate(conn, sql_dir)) == len(migrate.discover())
        first = sql_dir / "0001_core.sql"
        first.write_text(first.read_text() + "\n-- edited\n")
        with pytest.raises(StoreError, match=r"0001_core\.sql was changed after it was applied"):
            migrate.migrate(conn, sql_dir)


def test_a_badly_named_migration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "1_core.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match=r"NNNN_lowercase_name\.sql"):
        migrate.discover(tmp_path)


def test_d4_plain_postgresql_reports_no_timescaledb(plain_url: str, fresh_database: Any) -> None:
    db: FreshDatabase = fresh_database(plain_url)
    found = connect.ensure_schema(db.url, force=True)
    assert found is not None
    assert found.timescaledb_version is None and found.license is None
    assert found.hypertables == []
    for name in ("timescaledb", "hypertables", "compression", "retention",
                 "continuous_aggregates"):  # fmt: skip
        assert not found.features[name].on
        assert "not installed" in found.features[name].reason


@pytest.mark.timescale
def test_d4_apache_timescaledb_reports_what_its_license_lacks(
    timescale_url: str, fresh_database: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(features.RETENTION_ENV, "30")  # asked for, yet not offered under apache
    db: FreshDatabase = fresh_database(timescale_url, migrate=False)
    found = connect.ensure_schema(db.url, force=True)
    assert found is not None
    if found.license != "apache":
        pytest.skip(f"this TimescaleDB has license {found.license}, not the Apache build")
    assert found.features["timescaledb"].on
    assert found.features["hypertables"].on
    assert set(found.hypertables) == {"requests", "request_blocks", "ticks", "server_metrics"}
    for name in ("compression", "retention", "continuous_aggregates"):
        assert not found.features[name].on
        assert "license apache" in found.features[name].reason


def test_db_status_json_names_migrations_and_features(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(connect.DATABASE_ENV, store_url)
    out = CliRunner().invoke(db_command, ["status", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [m["version"] for m in data["migrations"]] == [m.version for m in migrate.discover()]
    assert data["pending_migrations"] == []
    assert set(data["features"]) == {"timescaledb", "hypertables", "compression", "retention",
                                     "continuous_aggregates"}  # fmt: skip
    assert "password" not in out.output.lower() or ":***@" in data["url"]


def test_redact_url_hides_passwords() -> None:
    secret = "s3cr3t-canary"
    for url in (
        f"postgresql://postgres:{secret}@127.0.0.1:5433/db",
        f"postgresql://u@h/db?password={secret}&sslmode=disable",
        f"host=127.0.0.1 password={secret} dbname=x",
        f"host=127.0.0.1 password='{secret} x' dbname=x",
    ):
        red = connect.redact_url(url)
        assert secret not in red, red
        assert "***" in red
