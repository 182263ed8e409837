"""The Run page of a multi-adapter run with a shared-prefix comparison (a synthetic run in its
own store): the Levels tab shows the per-adapter table (with the switch cost) and the prefix
table (TTFT with vs without, the server's cached tokens)."""

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

RUN = "00000000-0000-0000-0000-0000000010d1"
# runs of 3 requests per adapter: a, a, a, b, b, b, a, ...; the first of each run (after a
# switch) 300 ms to its first token, the rest 100 ms; even requests carry the shared prefix
N = 24


def _rows() -> list[dict[str, object]]:
    out = []
    for i in range(N):
        after_switch = i % 3 == 0 and i > 0
        ttft_us = 300_000 if after_switch else 100_000
        with_prefix = i % 2 == 0
        out.append(
            streamed(
                RUN,
                i,
                sent_ns=0,
                offsets_us=[ttft_us, ttft_us + 20_000],
                tokens=[1, 1],
                adapter="a" if (i // 3) % 2 == 0 else "b",
                shared_prefix_tokens=60 if with_prefix else 0,
                server_cached_tokens=60 if with_prefix else 0,
            )
        )
    return out


@pytest.fixture
def store(
    plain_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FreshDatabase]:
    db = FreshDatabase(plain_url)
    with psycopg.connect(db.url, autocommit=True) as conn:
        insert_run(conn, run_row(RUN, name="ui-lora"), [level_row(RUN, 0)], _rows())
    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", db.url)
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PEAKLOAD_UI_REQUIRE_AUTH", raising=False)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    yield db
    st_config.set_option("server.address", before)
    db.drop()


def test_run_page_breaks_down_by_adapter_and_prefix(store: FreshDatabase) -> None:
    at = AppTest.from_file(str(APP), default_timeout=PAGE_TIMEOUT_S)
    at.query_params["run"] = RUN
    at.switch_page("views/run.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    heads = [s.value for s in at.subheader]
    assert "Per adapter" in heads and "Prefix cache: with vs without the shared prefix" in heads
    tables = [d.value for d in at.dataframe]
    adapters = next(t for t in tables if "adapter" in t.columns)
    assert adapters["adapter"].tolist() == ["a", "b"]
    assert adapters["ok"].sum() == N
    for _, r in adapters.iterrows():
        assert r["ttft_after_switch_p50"] == pytest.approx(300.0)
        assert r["ttft_steady_p50"] == pytest.approx(100.0)
        assert r["switch_cost_ms"] == pytest.approx(200.0)
    prefix = next(t for t in tables if "arm" in t.columns)
    assert prefix["arm"].tolist() == ["with", "without"]
    assert prefix["cached_tokens_p50"].tolist() == [60.0, 0.0]
    assert prefix["hit_share"].tolist() == [1.0, 0.0]
