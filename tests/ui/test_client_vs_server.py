"""The Run page of a run whose server reported its own timings (a synthetic run in its own
store, tests/analysis/storedata.timed_requests): the "Client vs server" tab with the summary's
numbers, connection set-up and re-sends in the level table; a run without server timings has
no such tab."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import psycopg
import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from tests.analysis.storedata import insert_run, level_row, run_row, timed_requests
from tests.support.stores import FreshDatabase
from tests.ui.conftest import APP, PAGE_TIMEOUT_S

pytestmark = pytest.mark.integration

TIMED = "00000000-0000-0000-0000-0000000010c1"
PLAIN = "00000000-0000-0000-0000-0000000010c2"


@pytest.fixture
def store(
    plain_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FreshDatabase]:
    db = FreshDatabase(plain_url)
    with psycopg.connect(db.url, autocommit=True) as conn:
        insert_run(
            conn,
            run_row(TIMED, name="ui-timed"),
            [level_row(TIMED, lvl) for lvl in range(3)],
            timed_requests(TIMED),
        )
        insert_run(
            conn, run_row(PLAIN, name="ui-plain"), [level_row(PLAIN, 1)], timed_requests(PLAIN)[5:7]
        )
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", db.url)
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PEAKLOAD_UI_REQUIRE_AUTH", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    yield db
    st_config.set_option("server.address", before)
    db.drop()


def _run_page(run_id: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=PAGE_TIMEOUT_S)
    at.query_params["run"] = run_id
    at.switch_page("views/run.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_run_page_sets_the_client_against_the_server(store: FreshDatabase) -> None:
    at = _run_page(TIMED)
    assert [t.label for t in at.tabs][-2:] == ["Client vs server", "Export"]
    levels = at.dataframe[0].value
    share = levels["new conn %"]
    assert share.iloc[:2].tolist() == pytest.approx([60.0, 0.0]) and pd.isna(share.iloc[2])
    assert levels["connect p50 ms"].iloc[0] == 4.0
    assert levels["re-sent"].iloc[0] == 1
    panel = at.tabs[-2]
    table = panel.dataframe[0].value
    assert list(zip(table["level"], table["region"], strict=True)) == [
        (0, "all"),
        (0, "eu"),
        (0, "us"),
    ]
    row = table.iloc[0]
    assert row["client TTFT p50"] == 200.0 and row["server prefill+queue p50"] == 150.0
    assert row["TTFT gap"] == 50.0 and row["client ITL p50"] == 20.0
    assert row["server ITL p50"] == 18.0 and row["ITL gap"] == 2.0
    assert row["requests"] == 3
    assert table.iloc[1]["ITL gap"] == -3.0
    assert any("gap = client p50 - server p50" in str(c.value) for c in panel.caption)


def test_no_client_vs_server_tab_without_server_timings(store: FreshDatabase) -> None:
    at = _run_page(PLAIN)
    assert "Client vs server" not in [t.label for t in at.tabs]
    assert at.dataframe[0].value["re-sent"].tolist() == [0]
