"""The store through a transaction-mode PgBouncer (deploy/local/pgbouncer.sh), which hands each
transaction whichever server connection is free: a writer's batch, direct or through its TEMP
staging, runs on a server connection it never set up, and leaves nothing of itself in the
session; migrators racing through the pooler each finish and leave no lock held."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.pgbouncer import PgBouncer
from tests.support.stores import FreshDatabase
from tests.workers.store._records import make_records
from workers.store import batchsql, copyenc, migrate
from workers.store.connect import ensure_schema, pg_connect
from workers.store.spool import EncodedBatch

pytestmark = [pytest.mark.integration, pytest.mark.timescale]


@pytest.fixture
def two_servers(timescale_url: str) -> Iterator[tuple[PgBouncer, FreshDatabase]]:
    """A fresh migrated database behind a PgBouncer pool of two server connections."""
    db = FreshDatabase(timescale_url)
    pgb = PgBouncer(db.url, pool=2)
    yield pgb, db
    pgb.stop()
    db.drop()


def _settings_of_both_servers(url: str) -> list[str]:
    """idle_in_transaction_session_timeout as each of the pool's two server connections has it:
    two clients each hold one in a transaction at once."""
    with (
        pg_connect(url, autocommit=True) as a,
        pg_connect(url, autocommit=True) as b,
        a.transaction(),
        b.transaction(),
    ):
        shown = [c.execute("SHOW idle_in_transaction_session_timeout").fetchone() for c in (a, b)]
    return [str(row[0]) if row else "" for row in shown]


def test_a_batch_runs_on_a_server_connection_it_never_set_up_and_leaves_nothing(
    two_servers: tuple[PgBouncer, FreshDatabase],
) -> None:
    pgb, db = two_servers
    run_id = str(uuid.uuid4())
    records = make_records(run_id, 50)
    writer, blocks = batchsql.connect_writer(pgb.url, 10, "pl-test-writer")
    assert blocks
    req, blk = copyenc.encode_batch(records, False, blocks=blocks)
    enc = EncodedBatch(req, b"", len(records), 0, blk)
    try:
        with pg_connect(pgb.url, autocommit=True) as other, other.transaction():
            # `other` now holds the one server connection the writer has used (its set-up ran
            # there): the writer's batches get the second one
            other.execute("SELECT 1")
            assert batchsql.write_batch(writer, enc, staged=False, with_blocks=blocks) == (50, 0)
            # a replay: through TEMP staging, every row already stored, none twice
            assert batchsql.write_batch(writer, enc, staged=True, with_blocks=blocks) == (0, 0)
            assert batchsql.write_batch(writer, enc, staged=True, with_blocks=blocks) == (0, 0)
    finally:
        writer.close()
    assert _settings_of_both_servers(pgb.url) == ["0", "0"]  # SET LOCAL only
    with psycopg.connect(db.url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT count(*), count(DISTINCT request_id) FROM requests WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert rows == (50, 50)
        stats = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert stats == (0,)


def test_migrators_racing_through_the_pooler_all_finish_and_hold_no_lock(
    timescale_url: str,
) -> None:
    db = FreshDatabase(timescale_url, migrate=False)
    pgb = PgBouncer(db.url, pool=2)
    errors: list[BaseException] = []

    def one() -> None:
        try:
            ensure_schema(pgb.url, force=True)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    try:
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a migrator never finished"
        assert errors == []
        with psycopg.connect(db.url, autocommit=True) as conn:
            assert migrate.pending(conn) == []
            locks = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            ).fetchone()
            assert locks == (0,)
    finally:
        pgb.stop()
        db.drop()
