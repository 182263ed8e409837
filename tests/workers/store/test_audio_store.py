"""A speech run's audio columns (deploy/sql/0210, COPY layout 4) through the writer and back
through every read path: the values as recorded, no request_blocks for such a batch (readers
read `requests`), NaN columns for a run without audio, and a layout 3 payload (before 0210)
still COPYs, its rows with NULL audio; plain PostgreSQL and TimescaleDB."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import psycopg
import pytest

from analysis.metrics import audio
from analysis.store import fastload, load, packed
from loadgen.results.records import RequestRecord
from tests.workers.store._records import make_records
from tests.workers.store.test_choices_store import _write
from tests.workers.store.test_timings import _fields, _payload
from workers.store import copyenc
from workers.store.backfill import pack_run

pytestmark = pytest.mark.integration


def _with_audio(records: list[RequestRecord]) -> list[RequestRecord]:
    """Each ok record carrying 2.5 s + 10 ms x index of audio and as many words as its index."""
    return [
        dataclasses.replace(
            r,
            audio_ms=2500.0 + 10 * r.index,
            audio_bytes=48 * 2500 + r.index,
            transcript_words=r.index,
        )
        if r.ok
        else r
        for r in records
    ]


def test_audio_round_trips_on_every_read_path(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = _with_audio(make_records(run_id, 40))
    want = {r.index: r for r in records}
    _write(store_url, run_id, records, tmp_path / "spool")
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert packed.load_packed(conn, run_id) is None  # no blocks: they cannot hold audio
        assert pack_run(store_url, run_id) == 0
        df = load.load_requests(conn, run_id)
    fdf, _ = fastload.load_requests_fast(store_url, run_id)
    for frame in (df, fdf):
        assert audio.has_audio(frame)
        for idx, ms, n, words in zip(
            frame["idx"], frame["audio_ms"], frame["audio_bytes"], frame["transcript_words"],
            strict=True,
        ):  # fmt: skip
            r = want[int(idx)]
            if r.audio_ms is None:
                assert np.isnan(ms) and np.isnan(n) and np.isnan(words)
            else:
                assert (ms, n, words) == (r.audio_ms, r.audio_bytes, r.transcript_words)


def test_runs_without_audio_keep_their_blocks_and_read_nan(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    _write(store_url, run_id, make_records(run_id, 30), tmp_path / "spool")
    fdf, _ = fastload.load_requests_fast(store_url, run_id)  # from request_blocks
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert packed.load_packed(conn, run_id) is not None
    assert not audio.has_audio(fdf) and fdf["audio_ms"].isna().all()


def test_a_layout_3_payload_reads_without_audio(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    req, _ = copyenc.encode_batch(_with_audio(make_records(run_id, 20)), False, blocks=False)
    rows = _fields(req)
    assert all(len(r) == len(copyenc.REQUEST_COLUMNS) for r in rows)
    old = _payload([r[: len(copyenc.REQUEST_LAYOUTS[3])] for r in rows])
    cols = ", ".join(copyenc.REQUEST_LAYOUTS[3])
    copy = f"COPY requests ({cols}) FROM STDIN (FORMAT BINARY)"
    with psycopg.connect(store_url) as conn, conn.cursor() as cur, cur.copy(copy) as cp:
        cp.write(old)
    with psycopg.connect(store_url, autocommit=True) as conn:
        df = load.load_requests(conn, run_id)
    assert len(df) == 20 and df["audio_ms"].isna().all() and not audio.has_audio(df)
