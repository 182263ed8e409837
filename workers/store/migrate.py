"""Schema migrations: applies deploy/sql/NNNN_*.sql in order, once each, under an advisory lock,
recording each in `schema_migrations`. Feature switching (compression, retention, continuous
aggregates) and their detection live in workers/store/features.py.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg import sql

from loadgen.errors import StoreError

# deploy/sql/ is the single source of truth for the schema (analysis/ reads the same files'
# tables). peakload is installed editable (`pip install -e .`), so the repo root is two levels up
# from this package; PEAKLOAD_SQL_DIR is not needed in that layout.
SQL_DIR = Path(__file__).resolve().parents[2] / "deploy" / "sql"

# One fixed key for pg_advisory_xact_lock: every peakload migrator takes the same one, so two
# processes migrating the same database at once apply each migration one after the other.
MIGRATION_LOCK_KEY = 0x7065616B6C6F6164 & 0x7FFFFFFFFFFFFFFF  # "peakload"
_LOCK = "SELECT pg_advisory_xact_lock(%s)"

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_TABLE = sql.SQL(
    """CREATE TABLE IF NOT EXISTS schema_migrations (
        version    integer PRIMARY KEY,
        name       text        NOT NULL,
        checksum   text        NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )"""
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered SQL file; `checksum` is the sha256 hex of its bytes."""

    version: int
    name: str
    path: Path
    checksum: str

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    version: int
    name: str
    checksum: str
    applied_at: datetime


def discover(sql_dir: Path = SQL_DIR) -> list[Migration]:
    """The migrations in `sql_dir`, ordered by version. Raises StoreError on a malformed name or a
    duplicated version (both would make the order ambiguous)."""
    if not sql_dir.is_dir():
        raise StoreError(f"migrations folder not found: {sql_dir}")
    found: dict[int, Migration] = {}
    for path in sorted(sql_dir.glob("*.sql")):
        m = _NAME.match(path.name)
        if m is None:
            raise StoreError(f"{path}: migration files must be named NNNN_lowercase_name.sql")
        version = int(m.group(1))
        if version in found:
            raise StoreError(f"{path}: version {version} also used by {found[version].path.name}")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        found[version] = Migration(version, m.group(2), path, digest)
    return [found[v] for v in sorted(found)]


def applied(conn: psycopg.Connection[tuple[object, ...]]) -> list[AppliedMigration]:
    """Migrations recorded in the database (empty if `schema_migrations` does not exist yet)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
        row = cur.fetchone()
        rows: list[AppliedMigration] = []
        if row is not None and row[0]:
            cur.execute(
                "SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version"
            )
            for v, n, c, a in cur.fetchall():
                assert isinstance(v, int) and isinstance(a, datetime)
                rows.append(AppliedMigration(v, str(n), str(c), a))
    if not conn.autocommit:
        conn.rollback()
    return rows


def migrate(
    conn: psycopg.Connection[tuple[object, ...]], sql_dir: Path = SQL_DIR
) -> list[Migration]:
    """Apply every pending migration, each in its own transaction that first takes a
    transaction-level advisory lock and then looks again at what is applied, so concurrent
    migrators serialize, and no lock outlives its transaction (a transaction-mode pooler may
    hand each one a different server connection). Returns the migrations applied by this call
    (empty when up to date). Raises StoreError if an applied migration's file changed
    (checksum) or one fails to apply (that migration is rolled back; earlier ones stay).
    """
    wanted = discover(sql_dir)
    was_autocommit = conn.autocommit
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.rollback()
    conn.autocommit = True
    done: list[Migration] = []
    try:
        with conn.transaction():
            conn.execute(_LOCK, (MIGRATION_LOCK_KEY,))
            conn.execute(_CREATE_TABLE)
            have = {m.version: m for m in applied(conn)}
        for mig in wanted:
            if mig.version in have:  # applied already: it can only have changed on disk
                _check_unchanged(have[mig.version], mig)
                continue
            try:
                with conn.transaction():
                    conn.execute(_LOCK, (MIGRATION_LOCK_KEY,))
                    prev = {m.version: m for m in applied(conn)}.get(mig.version)
                    if prev is not None:
                        _check_unchanged(prev, mig)
                        continue
                    conn.execute(mig.text().encode())
                    conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) "
                        "VALUES (%s, %s, %s)",
                        (mig.version, mig.name, mig.checksum),
                    )
            except psycopg.Error as e:
                raise StoreError(f"migration {mig.path.name} failed: {e}") from e
            done.append(mig)
    finally:
        conn.autocommit = was_autocommit
    return done


def _check_unchanged(prev: AppliedMigration, mig: Migration) -> None:
    if prev.checksum != mig.checksum:
        raise StoreError(
            f"migration {mig.path.name} was changed after it was applied "
            f"(checksum {prev.checksum[:12]} in the database, "
            f"{mig.checksum[:12]} on disk); add a new migration instead"
        )


def pending(conn: psycopg.Connection[tuple[object, ...]], sql_dir: Path = SQL_DIR) -> list[str]:
    """File names of migrations not yet applied."""
    have = {m.version for m in applied(conn)}
    return [m.path.name for m in discover(sql_dir) if m.version not in have]
