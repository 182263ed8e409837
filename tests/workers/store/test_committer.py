"""A batch whose commit ends in an error the driver raised outside its own error classes (seen
under a fleet: psycopg's COPY end met two results from PgBouncer while the database restarted,
`ValueError: too many values to unpack`) is a lost connection, kept to replay, not a crashed
writer; the same error from anywhere else is a bug and is not hidden. The whole path, with a
real restart, is tests/workers/distributed/test_fleet.py's."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg.types.range import Range

from workers.store import batchsql, committer
from workers.store.spool import EncodedBatch
from workers.store.writer_stats import WriterStats


class FakeConnection:
    closed = False
    broken = False

    def close(self) -> None:
        self.closed = True


def _committer() -> tuple[committer.Committer, FakeConnection]:
    c = committer.Committer(
        "postgresql://unused",
        WriterStats(),
        application_name="test",
        connect_timeout_s=1,
        io_timeout_s=30,
        direct_copy=True,
    )
    conn = FakeConnection()
    c.conn = conn  # type: ignore[assignment]
    return c, conn


def _driver_confused(*_: Any, **__: Any) -> tuple[int, int]:
    Range(1, 2, bounds="xx")  # a ValueError raised inside psycopg's own code
    raise AssertionError("unreachable")


def _our_bug(*_: Any, **__: Any) -> tuple[int, int]:
    raise ValueError("raised by peakload's own code")


BATCH = EncodedBatch(b"", b"", 0, 0)


def test_an_error_raised_inside_the_driver_is_a_lost_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c, conn = _committer()
    monkeypatch.setattr(batchsql, "write_batch", _driver_confused)
    with pytest.raises(committer.Lost):
        c.commit(BATCH)
    assert conn.closed and c.conn is None  # dropped: the next batch reconnects
    assert c.stats.last_error is not None and "ValueError" in c.stats.last_error
    assert c.stats.batches_committed == 0


def test_the_same_error_from_our_own_code_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    c, conn = _committer()
    monkeypatch.setattr(batchsql, "write_batch", _our_bug)
    with pytest.raises(ValueError, match="peakload's own code"):
        c.commit(BATCH)
    assert not conn.closed


def test_where_an_error_was_raised() -> None:
    with pytest.raises(ValueError) as inside:
        Range(1, 2, bounds="xx")
    assert committer.raised_by_the_driver(inside.value)
    with pytest.raises(ValueError) as outside:
        _our_bug()
    assert not committer.raised_by_the_driver(outside.value)
