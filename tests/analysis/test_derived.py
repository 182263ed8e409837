"""Results kept beside the run cache (analysis.store.derived): a second report of an ended run
reads its curves and frontier instead of computing them; a changed run, other parameters,
other code or another database compute again; a running run keeps nothing; a damaged file or
a frame Parquet cannot hold costs only the computation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.reports import report as areport
from analysis.store import derived
from tests.analysis.storedata import insert_run, synthetic_run

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
    assert list(kept.folder.iterdir()) == []  # no file, whole or half-written
