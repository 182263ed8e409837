"""UI test fixtures: one session store holding real runs (tests/ui/stored_runs.py), the app
pointed at it through PEAKLOAD_DATABASE_URL, Streamlit told it listens on loopback, and an
`app_page` factory that opens one page with `AppTest`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import streamlit as st
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from tests.support.stores import FreshDatabase
from tests.ui.stored_runs import make_runs

APP = Path(__file__).resolve().parents[2] / "ui" / "app.py"
PAGE_TIMEOUT_S = 120


@dataclass(frozen=True)
class UiStore:
    url: str
    ids: dict[str, str]  # kind -> run_id: sweep, regions, failures, invalid
    cache_dir: str  # analysis.store.cache's directory for these tests (PEAKLOAD_ANALYSIS_CACHE)


@pytest.fixture(scope="session")
def ui_store(plain_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiStore]:
    """A fresh database on the session's embedded PostgreSQL with the four real runs."""
    db = FreshDatabase(plain_url)
    try:
        ids = make_runs(db.url, tmp_path_factory.mktemp("ui-runs"))
        yield UiStore(db.url, ids, str(tmp_path_factory.mktemp("ui-analysis-cache")))
    finally:
        db.drop()


@pytest.fixture
def app_env(ui_store: UiStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[UiStore]:
    """The app reads the test store; the server address is loopback (no login needed)."""
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", ui_store.url)
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", ui_store.cache_dir)
    monkeypatch.delenv("PEAKLOAD_UI_REQUIRE_AUTH", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    # data cached in this process by a test that read another store must not answer here
    st.cache_data.clear()
    yield ui_store
    st_config.set_option("server.address", before)


def open_page(name: str, **params: str) -> AppTest:
    """ui/app.py run once on page `name` with those query params; no page may raise."""
    at = AppTest.from_file(str(APP), default_timeout=PAGE_TIMEOUT_S)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(f"views/{name}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def app_page(app_env: UiStore) -> Callable[..., AppTest]:
    """`app_page("run", run=ID)`: `open_page` on the test store."""
    return open_page


def page_text(at: AppTest) -> str:
    """Everything a person reads on the page: titles, markdown, alerts, captions, metrics."""
    parts: list[str] = []
    for kind in (
        "title",
        "header",
        "subheader",
        "markdown",
        "caption",
        "error",
        "warning",
        "success",
        "info",
    ):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [f"{m.label}: {m.value}" for m in at.metric]
    return "\n".join(parts)
