"""`n > 1` chunk choices (deploy/sql/0190, COPY layout 3) through the writer and back through
every read path: per-choice ITL and TPOT equal the choices' own gap, not gap / n; such a batch
gets no request_blocks (readers read `requests`); a layout 2 payload (before 0190) still COPYs,
its rows with NULL choices and the single-series formulas; plain PostgreSQL and TimescaleDB."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis import metrics
from analysis.reports.export import write_requests
from analysis.store import fastload, load, packed
from loadgen.results.records import Batch, RequestRecord
from tests.workers.store._records import make_records
from tests.workers.store.test_timings import _fields, _payload
from workers.store import copyenc
from workers.store.backfill import pack_run
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

N, PER, GAP_US = 4, 12, 20_000


def _with_choices(records: list[RequestRecord]) -> list[RequestRecord]:
    """Each ok record as an n = 4 answer: choice c's j-th token at j * GAP + 50 c µs."""
    out = []
    for r in records:
        if not r.ok:
            out.append(r)
            continue
        offs = [1000 + j * GAP_US + 50 * c for j in range(PER) for c in range(N)]
        out.append(
            dataclasses.replace(
                r,
                chunk_offsets_us=offs,
                chunk_tokens=[1] * len(offs),
                chunk_choices=[c for _ in range(PER) for c in range(N)],
                output_tokens=len(offs),
                client_tokens=len(offs),
            )
        )
    return out


def _write(url: str, run_id: str, records: list[RequestRecord], spool: Path) -> None:
    w = StoreWriter(url, run_id, WriterConfig(spool_dir=spool, batch_max_s=0.05))
    w.write(Batch(records))
    w.flush()
    w.close()


def test_choices_round_trip_and_measure_per_choice(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = _with_choices(make_records(run_id, 60))
    ok = np.asarray([r.ok for r in records])
    _write(store_url, run_id, records, tmp_path / "spool")
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert packed.load_packed(conn, run_id) is None  # no blocks: they cannot hold choices
        assert pack_run(store_url, run_id) == 0
        df = load.load_requests(conn, run_id).sort_values("idx").reset_index(drop=True)
    assert df["chunk_choices"].notna().sum() == ok.sum()
    chunks = metrics.ChunkArrays.from_frame(df)
    itl = metrics.itl_per_token_ms(chunks, df["outcome"].eq("ok").to_numpy())
    assert itl.size == ok.sum() * N * (PER - 1) and np.allclose(itl, GAP_US / 1e3)
    rows = df["outcome"].eq("ok").to_numpy()
    assert np.allclose(metrics.tpot_ms(df)[rows], GAP_US / 1e3)
    for fmt in ("csv", "parquet", "jsonl"):  # exports carry the choices as lists, None: n = 1
        write_requests(df, tmp_path / f"out.{fmt}", fmt)
    back = pd.read_parquet(tmp_path / "out.parquet").sort_values("idx").reset_index(drop=True)
    assert list(back.loc[0, "chunk_choices"])[:N] == list(range(N))
    assert back.loc[3, "chunk_choices"] is None  # make_records' index 3 failed
    for packed_ok in (True, False):
        fdf, fchunks = fastload.load_requests_fast(store_url, run_id, packed=packed_ok)
        fok = fdf["outcome"].eq("ok").to_numpy()
        fitl = metrics.itl_per_token_ms(fchunks, fok)
        assert np.allclose(fitl, GAP_US / 1e3) and fitl.size == itl.size
        assert np.allclose(metrics.tpot_ms(fdf)[fok], GAP_US / 1e3)


def test_a_layout_2_payload_reads_as_one_series(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = make_records(run_id, 40)
    req, _ = copyenc.encode_batch(records, False, blocks=False)
    rows = _fields(req)
    assert all(len(r) == len(copyenc.REQUEST_COLUMNS) and r[41] is None for r in rows)  # n = 1
    old = _payload([r[:41] for r in rows])
    cols = ", ".join(copyenc.REQUEST_LAYOUTS[2])
    copy = f"COPY requests ({cols}) FROM STDIN (FORMAT BINARY)"
    with psycopg.connect(store_url) as conn, conn.cursor() as cur, cur.copy(copy) as cp:
        cp.write(old)
    with psycopg.connect(store_url, autocommit=True) as conn:
        df = load.load_requests(conn, run_id)
    assert df["chunk_choices"].isna().all()
    chunks = metrics.ChunkArrays.from_frame(df)
    assert chunks.choices is None
    fdf, fchunks = fastload.load_requests_fast(store_url, run_id, packed=False)
    assert fchunks.choices is None and "choice_tpot_ms" not in fdf
