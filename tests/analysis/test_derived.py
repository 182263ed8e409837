"""Results kept beside the run cache and in the store (analysis.store.derived): a second report
of an ended run reads its curves and frontier instead of computing them, and so does the first
report on another machine of a run `run` kept at its end; a changed run, other parameters,
other code or another database compute again; a running run keeps nothing; a damaged file or
row, a frame Parquet cannot hold or a store that refuses the write costs only the
computation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.reports import report as areport
from analysis.store import derived, fastload, load
from tests.analysis.storedata import insert_run, synthetic_run
from ui import results

RID = "00000000-0000-0000-0000-0000000000d1"


class Counted:
    """A computation that counts its calls and returns a fresh frame each time."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> pd.DataFrame:
        self.calls += 1
        out = pd.DataFrame(
            {
                "metric": ["ttft_ms", "itl_ms"],
                "level": [0, 1],
                "value": [1.5, np.nan],
                "kind": ["concurrency", None],
            }
        )
        out.attrs.update(metric="ttft_ms", percentile=99.0)
        return out


def _results(conn: psycopg.Connection[Any], folder: Path) -> derived.RunResults:
    return derived.RunResults.of(conn, RID, directory=folder)


@pytest.mark.integration
def test_a_second_report_reads_the_kept_curves_and_frontier(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu", "us"), fail_every=5, per_level=60))
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path))
    first = areport.build_report(pg_conn, RID, resamples=50)

    def not_again(*_a: Any, **_k: Any) -> None:
        raise AssertionError("computed again")

    monkeypatch.setattr(areport.pc, "percentile_curves", not_again)
    monkeypatch.setattr(areport.fr, "frontier_points", not_again)
    second = areport.build_report(pg_conn, RID, resamples=50)
    assert second == first
    assert len(first["curves"]) > 0 and len(first["frontier"]["points"]) >= 1
    # another frontier percentile is another result: computed (here: refused, so it raises)
    with pytest.raises(AssertionError, match="computed again"):
        areport.build_report(pg_conn, RID, resamples=50, frontier_percentile=90.0)


def _refuse(*_a: Any, **_k: Any) -> None:
    raise AssertionError("computed again")


@pytest.mark.integration
def test_a_run_kept_at_its_end_is_reported_on_another_machine_without_computing(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `run` does at a run's end (keep_default_results) puts the report's default curves
    and frontier in the store: a report from an empty local cache (another machine) reads
    them, equal to what it computes itself."""
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu", "us"), fail_every=5, per_level=60))
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path / "computed"))
    computed = areport.build_report(pg_conn, RID)  # on a machine that computes (and keeps)
    pg_conn.execute("DELETE FROM run_results")
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path / "the-runner"))
    df, chunks = fastload.load_requests_fast(pg_conn, RID)
    lv = load.load_levels(pg_conn, RID)
    # a run this small is not kept at its end: a report computes its results in milliseconds
    assert not areport.keep_default_results(pg_conn, RID, df, lv, chunks)
    assert pg_conn.execute("SELECT count(*) FROM run_results").fetchone() == (0,)
    assert areport.keep_default_results(pg_conn, RID, df, lv, chunks, min_chunks=0)
    names = pg_conn.execute("SELECT name FROM run_results ORDER BY name").fetchall()
    assert names == [("frontier_points",), ("percentile_curves",)]
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path / "another-machine"))
    monkeypatch.setattr(areport.pc, "percentile_curves", _refuse)
    monkeypatch.setattr(areport.fr, "frontier_points", _refuse)
    read = areport.build_report(pg_conn, RID)
    assert read == computed
    assert len(read["curves"]) > 0 and len(read["frontier"]["points"]) >= 1
    # once read from the store, the result is on this machine's disk too
    monkeypatch.setattr(derived.RunResults, "_read_stored", _refuse)
    assert areport.build_report(pg_conn, RID) == computed


@pytest.mark.integration
def test_the_summary_run_prints_at_a_run_s_end_keeps_a_big_run_s_results(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ui.results.summarize_run (what `run` and `submit` print and exit by) keeps the results
    of a run of KEEP_AT_END_MIN_CHUNKS chunks or more, and only those."""
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu",), fail_every=7, per_level=30))
    monkeypatch.setenv("PEAKLOAD_ANALYSIS_CACHE", str(tmp_path))
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    chunks = fastload.load_requests_fast(pg_conn, RID)[1].offsets_us.size
    monkeypatch.setattr(areport, "KEEP_AT_END_MIN_CHUNKS", chunks + 1)
    results.summarize_run(RID, url)
    assert pg_conn.execute("SELECT count(*) FROM run_results").fetchone() == (0,)
    monkeypatch.setattr(areport, "KEEP_AT_END_MIN_CHUNKS", chunks)
    results.summarize_run(RID, url)
    names = pg_conn.execute("SELECT name FROM run_results ORDER BY name").fetchall()
    assert names == [("frontier_points",), ("percentile_curves",)]


@pytest.mark.integration
def test_a_stored_result_is_used_only_under_its_key_and_replaced_by_a_newer_one(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu",), fail_every=7, per_level=30))
    compute = Counted()
    first = _results(pg_conn, tmp_path / "a").get("points", {"p": 99.0}, compute)
    read = _results(pg_conn, tmp_path / "b").get("points", {"p": 99.0}, compute)
    assert compute.calls == 1
    pd.testing.assert_frame_equal(read, first)
    assert read.attrs == {"metric": "ttft_ms", "percentile": 99.0}
    # the run changed (a row replayed later): the stored row is not used, then replaced
    pg_conn.execute(
        "UPDATE runs SET ended_at = ended_at + interval '1 second' WHERE run_id = %s", (RID,)
    )
    _results(pg_conn, tmp_path / "c").get("points", {"p": 99.0}, compute)
    assert compute.calls == 2
    _results(pg_conn, tmp_path / "d").get("points", {"p": 99.0}, compute)
    assert compute.calls == 2
    assert pg_conn.execute("SELECT count(*) FROM run_results").fetchone() == (1,)
    # a damaged row is computed again and replaced
    pg_conn.execute("UPDATE run_results SET frame = 'not parquet'::bytea")
    _results(pg_conn, tmp_path / "e").get("points", {"p": 99.0}, compute)
    assert compute.calls == 3
    _results(pg_conn, tmp_path / "f").get("points", {"p": 99.0}, compute)
    assert compute.calls == 3
    # a running run keeps nothing in the store either
    pg_conn.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (RID,))
    pg_conn.execute("DELETE FROM run_results")
    _results(pg_conn, tmp_path / "g").get("points", {"p": 99.0}, compute)
    assert pg_conn.execute("SELECT count(*) FROM run_results").fetchone() == (0,)


@pytest.mark.integration
def test_a_store_that_refuses_the_write_costs_only_the_computation(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu",), fail_every=7, per_level=30))
    pg_conn.execute("DROP TABLE run_results")  # a store migrated before deploy/sql/0260
    compute = Counted()
    out = _results(pg_conn, tmp_path / "a").get("points", {"p": 99.0}, compute)
    assert compute.calls == 1 and len(out) == 2
    assert "not stored" in caplog.text
    # the connection is still usable, and the local file still serves the next reader here
    _results(pg_conn, tmp_path / "a").get("points", {"p": 99.0}, compute)
    assert compute.calls == 1


@pytest.mark.integration
def test_kept_under_the_run_the_parameters_and_the_code(
    pg_conn: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu",), fail_every=7, per_level=30))
    compute = Counted()
    first = _results(pg_conn, tmp_path).get("points", {"p": 99.0}, compute)
    again = _results(pg_conn, tmp_path).get("points", {"p": 99.0}, compute)
    assert compute.calls == 1
    pd.testing.assert_frame_equal(again, first)
    assert again.attrs == {"metric": "ttft_ms", "percentile": 99.0}
    _results(pg_conn, tmp_path).get("points", {"p": 90.0}, compute)
    assert compute.calls == 2
    # other analysis code (or numpy, pandas): computed again
    monkeypatch.setattr(derived, "code_version", lambda: "another")
    _results(pg_conn, tmp_path).get("points", {"p": 99.0}, compute)
    assert compute.calls == 3
    monkeypatch.undo()
    # the run changed (a row replayed later): computed again, the older files removed
    pg_conn.execute(
        "UPDATE runs SET ended_at = ended_at + interval '1 second' WHERE run_id = %s", (RID,)
    )
    kept = _results(pg_conn, tmp_path)
    kept.get("points", {"p": 99.0}, compute)
    assert compute.calls == 4
    assert [p.name.split("-")[0] for p in kept.folder.iterdir()] == [kept.prefix]
    # a run still going keeps nothing
    pg_conn.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (RID,))
    for _ in range(2):
        _results(pg_conn, tmp_path).get("points", {"p": 99.0}, compute)
    assert compute.calls == 6


FP = {
    "store": "127.0.0.1:5432/a",
    "run_id": RID,
    "status": "completed",
    "ended_at": "2026-12-05T00:00:00",
    "rows": 3,
    "last": None,
}


def test_another_database_holding_the_same_run_id_is_another_key(tmp_path: Path) -> None:
    here = derived.RunResults(RID, FP, tmp_path)
    there = derived.RunResults(RID, {**FP, "store": "127.0.0.1:5432/b"}, tmp_path)
    assert here.path("x", {}) != there.path("x", {})
    assert here.folder != there.folder
    assert derived.RunResults(RID, None, tmp_path).path("x", {}) is None


def test_a_damaged_file_is_computed_again(tmp_path: Path) -> None:
    kept = derived.RunResults(RID, FP, tmp_path)
    compute = Counted()
    kept.get("points", {}, compute)
    path = kept.path("points", {})
    assert path is not None
    path.write_bytes(b"not parquet")
    out = kept.get("points", {}, compute)
    assert compute.calls == 2 and len(out) == 2
    pd.testing.assert_frame_equal(kept.get("points", {}, compute), out)  # rewritten whole
    assert compute.calls == 2


def test_a_frame_parquet_cannot_hold_is_returned_and_not_kept(tmp_path: Path) -> None:
    kept = derived.RunResults(RID, FP, tmp_path)
    mixed = pd.DataFrame({"value": [1, "two", 3.0]})  # mixed types: pyarrow refuses
    out = kept.get("mixed", {}, lambda: mixed)
    assert out is mixed
    assert not kept.folder.exists() or list(kept.folder.iterdir()) == []  # no file, whole or half
