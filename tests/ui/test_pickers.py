"""The pickers' labels (ui.data.shared.read_labels, what the Live page lists every second):
running runs only, read without request counts, a local run whose process died reaped first
(listed `failed`, not offered as running)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.support.local_runs import gone_owner, start_local_run
from tests.support.stores import FreshDatabase
from ui.data import shared
from workers.local_lease import owner_id

pytestmark = pytest.mark.integration


def test_running_runs_are_listed_and_a_dead_local_one_is_reaped_first(
    plain_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = FreshDatabase(plain_url)
    dead, live, ended = (str(uuid.uuid4()) for _ in range(3))
    try:
        with psycopg.connect(db.url, autocommit=True) as conn:
            owners = {dead: gone_owner(), live: owner_id()}
            for run_id in (dead, live, ended):
                start_local_run(conn, run_id, "picked", owners.get(run_id))
            conn.execute("UPDATE runs SET status = 'completed' WHERE run_id = %s", (ended,))
        monkeypatch.setenv("PEAKLOAD_DATABASE_URL", db.url)
        assert list(shared.read_labels(status="running")) == [live]
        assert set(shared.read_labels()) == {dead, live, ended}
        with psycopg.connect(db.url, autocommit=True) as conn:
            row = conn.execute("SELECT status FROM runs WHERE run_id = %s", (dead,)).fetchone()
        assert row is not None and row[0] == "failed"
    finally:
        with shared.store().conn() as kept:  # the app's shared connection to this database
            kept.close()
        db.drop()
