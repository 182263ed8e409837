"""loadgen.results.storeformat against the schema deploy/sql/ builds: every column the writer COPYs
exists with the order the packed blocks and readers assume, and nothing the store has is
left out of the lists (a column added to the SQL without its place here fails)."""

from __future__ import annotations

import itertools

import psycopg
import pytest

from loadgen.results import storeformat as sf

pytestmark = pytest.mark.integration


def _columns(url: str, table: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
            (table,),
        ).fetchall()
    return [r[0] for r in rows]


def test_lists_match_the_migrated_schema(store_url: str) -> None:
    assert _columns(store_url, "requests") == list(sf.REQUEST_COLUMNS)
    assert _columns(store_url, "ticks") == list(sf.TICK_COLUMNS)
    assert _columns(store_url, "request_blocks") == list(sf.BLOCK_COLUMNS)


def test_layouts_only_append() -> None:
    layouts = [sf.REQUEST_LAYOUTS[k] for k in sorted(sf.REQUEST_LAYOUTS)]
    for older, newer in itertools.pairwise(layouts):
        assert newer[: len(older)] == older
    assert sf.REQUEST_LAYOUTS[sf.REQUESTS_LAYOUT] == sf.REQUEST_COLUMNS
    assert set(sf.READ_COLUMNS) | set(sf.CONTENT_COLUMNS) == set(sf.REQUEST_COLUMNS)
    assert sorted(sf.BLOCK_MAGIC) == sorted(sf.BLOCK_SCALARS)
    assert max(sf.BLOCK_MAGIC) == sf.BLOCK_FORMAT
