"""The Run page of a speech run (a synthetic run in its own store): an "Audio" tab with the
summary's time to first audio byte, real-time factor and audio rate; a text run has none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from tests.analysis.storedata import insert_run, level_row, run_row, streamed
from tests.support.stores import FreshDatabase
from tests.ui.conftest import APP, PAGE_TIMEOUT_S

pytestmark = pytest.mark.integration

SPOKEN = "00000000-0000-0000-0000-0000000a0d10"
TEXT = "00000000-0000-0000-0000-0000000a0d11"


def _speech(run_id: str) -> list[dict[str, object]]:
    # TTFAB 100 ms, chunks 50 ms apart, 1 s of audio in 0.25 s: RTF 0.25, 4x real time
    return [
        streamed(
            run_id,
            i,
            sent_ns=0,
            offsets_us=[100_000, 150_000, 200_000, 250_000],
            tokens=[1, 1, 1, 1],
            audio_ms=1000.0,
            audio_bytes=48_000,
        )
        for i in range(6)
    ]


@pytest.fixture
def store(
    plain_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FreshDatabase]:
    db = FreshDatabase(plain_url)
    with psycopg.connect(db.url, autocommit=True) as conn:
        insert_run(conn, run_row(SPOKEN, name="ui-speech"), [level_row(SPOKEN, 0)], _speech(SPOKEN))
        text = [streamed(TEXT, i, sent_ns=0, offsets_us=[100_000], tokens=[1]) for i in range(3)]
        insert_run(conn, run_row(TEXT, name="ui-text"), [level_row(TEXT, 0)], text)
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


def test_a_speech_run_has_an_audio_tab(store: FreshDatabase) -> None:
    at = _run_page(SPOKEN)
    assert [t.label for t in at.tabs][-2:] == ["Audio", "Export"]
    table = at.tabs[-2].dataframe[0].value
    row = table.iloc[0]
    assert row["TTFAB p50 ms"] == pytest.approx(100.0)
    assert row["RTF p50"] == pytest.approx(0.25) and row["audio x p50"] == pytest.approx(4.0)
    assert row["chunk gap p50 ms"] == pytest.approx(50.0) and row["audio s"] == pytest.approx(6.0)
    assert "Audio" not in [t.label for t in _run_page(TEXT).tabs]
