"""ui.data.shared.Readers: the connections the runs' loads borrow are kept between loads, a
kept one the store dropped is replaced within the same load, and a load that fails closes the
connection it had."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from ui.data.shared import Readers

pytestmark = pytest.mark.integration


@pytest.fixture
def made() -> Iterator[list[Readers]]:
    """The Readers a test made, closed after it (their kept connections with them)."""
    made: list[Readers] = []
    yield made
    for readers in made:
        readers.close()


def _pid(conn: psycopg.Connection[Any]) -> int:
    return int(conn.info.backend_pid)


def test_a_kept_connection_serves_the_next_load_and_a_dropped_one_is_replaced(
    store_url: str, made: list[Readers]
) -> None:
    readers = Readers(store_url, keep=1)
    made.append(readers)
    first = readers.run(_pid)
    assert readers.run(_pid) == first  # the same session: no new authentication
    with psycopg.connect(store_url, autocommit=True) as admin:  # the store drops it while kept
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))
    again = readers.run(lambda c: int(c.execute("SELECT pg_backend_pid()").fetchone()[0]))
    assert again != first  # answered, on a new connection
    assert readers.run(_pid) == again


def test_a_failed_load_closes_its_connection_and_raises(
    store_url: str, made: list[Readers]
) -> None:
    readers = Readers(store_url, keep=2)
    made.append(readers)
    seen: list[psycopg.Connection[Any]] = []

    def fails(conn: psycopg.Connection[Any]) -> None:
        seen.append(conn)
        raise ValueError("the load's own error")

    with pytest.raises(ValueError, match="the load's own error"):
        readers.run(fails)
    assert seen[0].closed
    readers.run(_pid)  # kept for the next
    with pytest.raises(ValueError):
        readers.run(fails)  # the kept one, failing: closed too, not kept
    assert seen[1].closed
    both = {readers.run(_pid) for _ in range(3)}
    assert len(both) == 1  # loads one after another share one kept connection
    readers.close()
    assert readers.run(_pid) not in both  # closed: the next load opens a new one
