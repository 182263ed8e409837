"""The same run stored in plain PostgreSQL (embedded) and in TimescaleDB gives identical
numbers; on TimescaleDB, `time_bucket` and `date_bin` give identical series."""

from __future__ import annotations

from typing import Any

import pandas as pd
import psycopg
import pytest

from analysis.reports.report import build_report
from analysis.store import buckets
from tests.analysis.storedata import insert_run, synthetic_run

RID = "00000000-0000-0000-0000-0000000000c7"


def _store(conn: psycopg.Connection[Any]) -> None:
    insert_run(
        conn,
        *synthetic_run(
            RID,
            levels=(("rate", 4.0), ("rate", 8.0)),
            regions=("eu", "us", "ap"),
            fail_every=7,
            reasoning=True,
            per_level=90,
            duration_s=12.0,
        ),
    )


@pytest.mark.integration
@pytest.mark.timescale
def test_same_numbers_on_both_stores(
    pg_conn: psycopg.Connection[Any], ts_conn: psycopg.Connection[Any]
) -> None:
    _store(pg_conn)
    _store(ts_conn)
    assert buckets.bucket_function(pg_conn) == "date_bin"
    assert buckets.bucket_function(ts_conn) == "time_bucket"
    pg = build_report(pg_conn, RID, resamples=200, bucket_s=3.0)
    ts = build_report(ts_conn, RID, resamples=200, bucket_s=3.0)
    assert pg == ts
    assert len(pg["timeseries"]["rows"]) > 10


@pytest.mark.integration
@pytest.mark.timescale
def test_time_bucket_equals_date_bin(ts_conn: psycopg.Connection[Any]) -> None:
    _store(ts_conn)
    for width in (1.0, 2.5, 7.0, 60.0):
        a = buckets.timeseries(ts_conn, RID, width, bucket_fn="time_bucket")
        b = buckets.timeseries(ts_conn, RID, width, bucket_fn="date_bin")
        pd.testing.assert_frame_equal(a, b)
        assert len(a) > 0
