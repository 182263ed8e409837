"""The Run page of a run imported from AIPerf (tests/workers/imports/fixtures): its numbers like any
run's, and in its Labels tab what the import held and what the tool did not record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.ui.conftest import UiStore, page_text
from tests.workers.imports.conftest import FIXTURES
from workers.imports.tools import import_run

pytestmark = pytest.mark.integration


def test_run_page_of_an_aiperf_import(app_page: Callable[..., Any], app_env: UiStore) -> None:
    rid, _ = import_run("aiperf", FIXTURES / "aiperf", name="ui-aiperf", url=app_env.url)
    try:
        at = app_page("run", run=rid)
        text = page_text(at)
        assert not at.exception, at.exception
        assert "imported from aiperf 0.13.0" in text
        assert "not recorded: generator health" in text
        assert "ui-aiperf" in text
    finally:
        with psycopg.connect(app_env.url, autocommit=True) as conn:
            conn.execute("DELETE FROM request_blocks WHERE run_id = %s", (rid,))
            conn.execute("DELETE FROM requests WHERE run_id = %s", (rid,))
            conn.execute("DELETE FROM runs WHERE run_id = %s", (rid,))
