"""A request's adapter and shared-prefix tokens (deploy/sql/0220, COPY layout 4) through the
writer and back through every read path: `load_requests`, the packed blocks (which do not
carry them) and the binary COPY reader; a run without them reads as missing; plain PostgreSQL
and TimescaleDB."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.reports.export import write_requests
from analysis.store import fastload, load, packed
from loadgen.results.records import Batch, RequestRecord
from tests.workers.store._records import make_records
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

ADAPTERS = ("sql", "chat", "base")


def _with_workload(records: list[RequestRecord]) -> list[RequestRecord]:
    return [
        dataclasses.replace(
            r, adapter=ADAPTERS[r.index % 3], shared_prefix_tokens=(r.index % 2) * 40
        )
        for r in records
    ]


def _write(url: str, run_id: str, records: list[RequestRecord], spool: Path) -> None:
    w = StoreWriter(url, run_id, WriterConfig(spool_dir=spool, batch_max_s=0.05))
    w.write(Batch(records))
    w.flush()
    w.close()


def test_adapter_and_prefix_round_trip_every_read_path(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = _with_workload(make_records(run_id, 30))
    _write(store_url, run_id, records, tmp_path / "spool")
    want_adapter = [ADAPTERS[i % 3] for i in range(30)]
    want_prefix = [float((i % 2) * 40) for i in range(30)]
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert packed.load_packed(conn, run_id) is not None  # blocks kept: the columns ride beside
        df = load.load_requests(conn, run_id).sort_values("idx").reset_index(drop=True)
    assert df["adapter"].tolist() == want_adapter
    assert df["shared_prefix_tokens"].tolist() == want_prefix
    for packed_ok in (True, False):
        fdf, _ = fastload.load_requests_fast(store_url, run_id, packed=packed_ok)
        fdf = fdf.sort_values("idx").reset_index(drop=True)
        assert fdf["adapter"].tolist() == want_adapter, packed_ok
        assert fdf["shared_prefix_tokens"].tolist() == want_prefix, packed_ok
    for fmt in ("csv", "parquet", "jsonl"):  # exports carry them
        write_requests(df, tmp_path / f"out.{fmt}", fmt)
    back = pd.read_parquet(tmp_path / "out.parquet").sort_values("idx")
    assert back["adapter"].tolist() == want_adapter


def test_a_run_without_them_reads_as_missing(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    _write(store_url, run_id, make_records(run_id, 10), tmp_path / "spool")
    with psycopg.connect(store_url, autocommit=True) as conn:
        df = load.load_requests(conn, run_id)
    assert df["adapter"].isna().all() and df["shared_prefix_tokens"].isna().all()
    fdf, _ = fastload.load_requests_fast(store_url, run_id)
    assert fdf["adapter"].isna().all() and np.isnan(fdf["shared_prefix_tokens"]).all()
