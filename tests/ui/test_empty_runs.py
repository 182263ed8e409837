"""The app on runs that measured nothing (issue 15): a run with no levels and a run whose
levels got no request — as a run killed in its warm-up leaves them — each page says so in a
sentence instead of raising."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import streamlit as st
from streamlit import config as st_config

from tests.cli.test_hostile_input import empty_run
from tests.support.stores import FreshDatabase
from tests.ui.conftest import open_page, page_text

pytestmark = pytest.mark.integration


@pytest.fixture
def empty_store(
    plain_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    db = FreshDatabase(plain_url)
    ids = {
        "no_levels": empty_run(db.url),
        "levels_no_requests": empty_run(db.url, levels=True),
    }
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", db.url)
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path_factory.mktemp("empty-cache")))
    monkeypatch.delenv("PEAKLOAD_UI_REQUIRE_AUTH", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    yield ids
    st_config.set_option("server.address", before)
    st.cache_data.clear()  # what the pages cached of this store must not outlive it
    db.drop()


@pytest.mark.parametrize("kind", ["no_levels", "levels_no_requests"])
def test_pages_of_a_run_without_requests_say_so(kind: str, empty_store: dict[str, str]) -> None:
    run_id = empty_store[kind]
    run = open_page("run", run=run_id)
    text = page_text(run)
    assert "has no requests" in text, text
    assert "its process died during warm-up" in text
    open_page("runs")
    sla = open_page("sla", run=run_id)
    assert "has no requests" in page_text(sla), page_text(sla)
    cmp = open_page("compare", runs=f"{run_id},{empty_store['no_levels']}")
    assert "Traceback" not in page_text(cmp)


def test_the_runs_page_marks_a_run_whose_process_died(empty_store: dict[str, str]) -> None:
    import uuid

    import psycopg

    from tests.support.local_runs import gone_owner, start_local_run

    run_id = str(uuid.uuid4())
    url = os.environ["PEAKLOAD_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        start_local_run(conn, run_id, "killed", gone_owner())
    import streamlit as st

    st.cache_data.clear()  # the runs list of an earlier page in this process is cached
    table = open_page("runs").dataframe[0].value
    assert list(table.loc[table["name"] == "killed", "status"]) == ["failed"]
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status_reason FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None and "is gone" in row[0]
