"""A finished run's summary kept in the store (analysis.store.summaries): read back it equals the
summary computed from the requests, on both stores; it is found only under the key it was
computed with (a run still running, a row landing later, other analysis code: none); and
`peakload run`'s end (ui.results.summarize_run) keeps the one it printed, and the verdict it
exits with beside it, valid under the same key only."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import psycopg
import pytest

from analysis.reports.summary import level_summary
from analysis.store import summaries
from analysis.store.fastload import load_requests_fast
from analysis.store.load import load_levels, load_run
from tests.analysis.storedata import _insert as insert_rows
from tests.analysis.storedata import (
    insert_run,
    level_row,
    request_row,
    run_row,
    synthetic_run,
    timed_requests,
)

SWEEP = "00000000-0000-0000-0000-0000000005a1"
TIMED = "00000000-0000-0000-0000-0000000005a2"
SLO = {"metric": "ttft_ms", "percentile": 99, "threshold": 80}  # goodput and attainment too


def same(a: Any, b: Any) -> bool:
    """Equal as the computed summary is: the same keys, numbers of the same kind and value (NaN
    equal to NaN), a tuple equal to the list JSON makes of it."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    a = a.item() if isinstance(a, np.generic) else a
    b = b.item() if isinstance(b, np.generic) else b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def computed(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    df, chunks = load_requests_fast(conn, run_id)
    return level_summary(df, load_levels(conn, run_id), load_run(conn, run_id), chunks=chunks)


def store_runs(conn: psycopg.Connection[Any]) -> None:
    run, levels, reqs, ticks = synthetic_run(
        SWEEP,
        levels=(("rate", 5.0), ("rate", 20.0), ("concurrency", 8.0)),
        regions=("eu", "us", "ap"),
        per_level=40,
        fail_every=7,
        reasoning=True,
        run_over={
            "spec": {
                "name": "s",
                "slos": [{"metric": "ttft_ms", "percentile": 99, "threshold": 80}],
            }
        },
    )
    insert_run(conn, run, levels, reqs, ticks)
    timed = [level_row(TIMED, k) for k in range(3)]
    insert_run(conn, run_row(TIMED), timed, timed_requests(TIMED))


@pytest.fixture(params=["plain", "timescale"])
def conn(request: pytest.FixtureRequest) -> psycopg.Connection[Any]:
    c: psycopg.Connection[Any] = request.getfixturevalue(
        "pg_conn" if request.param == "plain" else "ts_conn"
    )
    return c


@pytest.mark.parametrize("run_id", [SWEEP, TIMED], ids=["sweep", "server-timings"])
def test_a_kept_summary_reads_back_as_the_one_computed(
    conn: psycopg.Connection[Any], run_id: str
) -> None:
    store_runs(conn)
    run = load_run(conn, run_id)
    fresh = computed(conn, run_id)
    assert summaries.load_summary(conn, run) is None
    assert summaries.store_summary(conn, run, fresh)
    kept = summaries.load_summary(conn, run)
    assert kept is not None and same(fresh, kept)
    assert len(kept["levels"]) == 3 and kept["levels"][0]["regions"]


def test_a_summary_is_found_only_under_the_key_it_was_computed_with(
    pg_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store_runs(pg_conn)
    run = load_run(pg_conn, SWEEP)
    summaries.store_summary(pg_conn, run, computed(pg_conn, SWEEP))
    assert summaries.load_summary(pg_conn, run) is not None
    # a run still running is never kept: its summary changes with every row
    running = {**run, "status": "running"}
    assert not summaries.store_summary(pg_conn, running, {"levels": []})
    assert summaries.load_summary(pg_conn, running) is None
    # other analysis code (or numpy, pandas): computed afresh
    monkeypatch.setattr(summaries, "code_version", lambda: "another")
    assert summaries.load_summary(pg_conn, run) is None
    monkeypatch.undo()
    # a row that lands after the summary (a spool replayed later) changes the run's count
    late = request_row(SWEEP, 10_000, level=0, region="eu", shard_id="eu-0")
    with pg_conn.transaction():
        insert_rows(pg_conn, "requests", [late])
    grown = load_run(pg_conn, SWEEP)
    assert grown["requests"] == run["requests"] + 1
    assert summaries.load_summary(pg_conn, grown) is None
    # deleting the run deletes its summary
    pg_conn.execute("DELETE FROM runs WHERE run_id = %s", (SWEEP,))
    assert pg_conn.execute("SELECT count(*) FROM run_summaries").fetchone() == (0,)


def test_the_code_version_follows_the_analysis_modules() -> None:
    v = summaries.code_version()
    assert len(v) == 16 and v == summaries.code_version()


def test_run_s_end_keeps_the_summary_it_printed(pg_conn: psycopg.Connection[Any]) -> None:
    from ui.results import summarize_run

    store_runs(pg_conn)
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    printed = summarize_run(SWEEP, url)
    kept = summaries.load_summary(pg_conn, load_run(pg_conn, SWEEP))
    assert kept is not None
    # the printed summary is level_summary plus what `run` adds (diagnosis, cost, verdict)
    assert set(printed) - set(kept) == {"diagnosis", "server_levels", "cost", "verdict"}
    assert same({k: printed[k] for k in kept}, kept)
    # and the verdict it exits with, as printed
    verdict = summaries.load_verdict(pg_conn, load_run(pg_conn, SWEEP))
    assert verdict is not None and same(verdict, printed["verdict"])


def test_a_kept_verdict_rides_on_its_summary_s_key(
    pg_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store_runs(pg_conn)
    run = load_run(pg_conn, SWEEP)
    verdict = {"exit_code": 0, "reason": "every criterion met", "criteria": [], "x": math.nan}
    # no summary row: nothing to keep it on
    assert not summaries.store_verdict(pg_conn, run, verdict)
    assert summaries.load_verdict(pg_conn, run) is None
    summary = computed(pg_conn, SWEEP)
    assert summaries.store_summary(pg_conn, run, summary)
    assert summaries.load_verdict(pg_conn, run) is None
    assert summaries.store_verdict(pg_conn, run, verdict)
    kept = summaries.load_verdict(pg_conn, run)
    assert kept is not None and same(kept, verdict)
    # the summary stored again under the same key (a report, a page): the verdict stays
    assert summaries.store_summary(pg_conn, run, summary)
    assert summaries.load_verdict(pg_conn, run) is not None
    # other analysis code: not found; its summary stored without one clears the old verdict
    monkeypatch.setattr(summaries, "code_version", lambda: "another")
    assert summaries.load_verdict(pg_conn, run) is None
    assert summaries.store_summary(pg_conn, run, summary)
    monkeypatch.undo()
    assert summaries.load_verdict(pg_conn, run) is None
    row = pg_conn.execute("SELECT verdict FROM run_summaries WHERE run_id = %s", (SWEEP,))
    assert row.fetchone() == (None,)
    # a run still running keeps none
    assert not summaries.store_verdict(pg_conn, {**run, "status": "running"}, verdict)
