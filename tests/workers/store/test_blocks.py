"""request_blocks: the writer packs each batch; analysis reads a run from its blocks when they
cover exactly its rows, and from the int[] columns otherwise, with identical frames, chunk
arrays and curves either way, on plain PostgreSQL and TimescaleDB alike."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis import metrics as m
from analysis.stats import percentiles as pc
from analysis.store import cache, fastload, packed
from loadgen.results.records import Batch, Outcome, Phase, RequestRecord
from tests.analysis.storedata import insert_run, synthetic_run
from tests.support.stores import FreshDatabase, StatementLog
from tests.workers.store._records import make_records
from workers.store import copyenc
from workers.store.spool import EncodedBatch
from workers.store.writer import StoreWriter, WriterConfig

pytestmark = pytest.mark.integration

Loaded = tuple[pd.DataFrame, m.ChunkArrays]


def _varied(run_id: str, n: int) -> list[RequestRecord]:
    """Records with every kind of value a block must carry: NULLs, texts with a NUL, two
    shards and regions, phases, chunk lists of many lengths with multi-token chunks."""
    rng = np.random.default_rng(8)
    out = []
    for i, r in enumerate(make_records(run_id, n, chunks=4)):
        k = int(rng.integers(0, 40)) if r.outcome is Outcome.OK else 0
        offs = np.cumsum(rng.integers(1, 30_000, k)).tolist()
        toks = rng.integers(1, 4, k).tolist()
        out.append(
            dataclasses.replace(
                r,
                shard_id=f"s{i % 2}",
                region=("eu", "us", "ap")[i % 3],
                phase=Phase.WARMUP if i % 10 == 0 else Phase.STEADY,
                error_phase="bad\x00phase" if i % 13 == 5 else r.error_phase,
                prompt_tokens=None if i % 4 == 0 else 100 + i,
                usage_completion_tokens=None if i % 3 else sum(toks),
                chunk_offsets_us=offs,
                chunk_tokens=toks,
                output_tokens=sum(toks),
                client_tokens=sum(toks),
            )
        )
    return out


def _write(url: str, run_id: str, records: list[RequestRecord], tmp: Path, per: int) -> None:
    w = StoreWriter(
        url, run_id, WriterConfig(spool_dir=tmp / f"spool-{uuid.uuid4().hex[:6]}", batch_max_s=0.05)
    )
    for i in range(0, len(records), per):
        w.write(Batch(records[i : i + per]))
        w.flush()  # one block per write
    w.close()


def _sorted(df: pd.DataFrame, ch: m.ChunkArrays) -> tuple[pd.DataFrame, list[list[int]]]:
    order = np.argsort(df["idx"].to_numpy(), kind="stable")
    rows = [
        ch.offsets_us[ch.ptr[i] : ch.ptr[i + 1]].tolist()
        + ch.tokens[ch.ptr[i] : ch.ptr[i + 1]].tolist()
        for i in order
    ]
    return df.iloc[order].reset_index(drop=True), rows


def _both(url: str, run_id: str) -> tuple[Loaded, Loaded]:
    fast = fastload.load_requests_fast(url, run_id, parallel=2)
    slow = fastload.load_requests_fast(url, run_id, parallel=2, packed=False)
    return fast, slow


def _assert_same(a: Loaded, b: Loaded) -> None:
    fa, ra = _sorted(*a)
    fb, rb = _sorted(*b)
    pd.testing.assert_frame_equal(fa, fb)
    assert ra == rb
    assert a[1].offsets_us.dtype == b[1].offsets_us.dtype and a[1].tokens.dtype == b[1].tokens.dtype
    ca = pc.percentile_curves(a[0], a[1], resamples=1)
    cb = pc.percentile_curves(b[0], b[1], resamples=1)
    pd.testing.assert_frame_equal(ca, cb)


def test_packed_and_arrays_give_the_same_run(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = _varied(run_id, 700)
    _write(store_url, run_id, records, tmp_path, 150)
    # a replay of a batch (a second writer, same rows): no new rows, no second block
    _write(store_url, run_id, records[150:300], tmp_path, 150)
    with psycopg.connect(store_url) as conn:
        n_blocks = conn.execute(
            "SELECT count(*), sum(n_requests) FROM request_blocks WHERE run_id = %s", (run_id,)
        ).fetchone()
        assert n_blocks == (5, 700)
        assert packed.load_packed(conn, run_id) is not None
    fast, slow = _both(store_url, run_id)
    assert len(fast[0]) == 700
    _assert_same(fast, slow)
    df = fast[0]
    assert set(df["error_phase"].dropna()) >= {"bad\ufffdphase"}
    assert df["prompt_tokens"].isna().sum() == 175


def test_a_load_without_chunk_arrays_reads_them_later_from_the_same_blocks(
    store_url: str, tmp_path: Path
) -> None:
    """The frame of a load that leaves the chunk arrays in the store is the full load's, and
    the arrays read afterwards are too; once a block it read is gone, the late read says the
    run changed instead of returning arrays that no longer match the frame."""
    run_id = str(uuid.uuid4())
    _write(store_url, run_id, _varied(run_id, 500), tmp_path, 120)
    full = fastload.load_requests_fast(store_url, run_id)
    df, pending = fastload.load_requests_deferred(store_url, run_id)
    assert isinstance(pending, fastload.PendingChunks) and len(pending.blocks) == 5
    pd.testing.assert_frame_equal(df, full[0])
    with psycopg.connect(store_url, autocommit=True) as conn:
        late = fastload.load_pending_chunks(conn, pending)
        _assert_same((df, late), full)
        assert np.array_equal(late.offsets_us, full[1].offsets_us)
        conn.execute(
            "DELETE FROM request_blocks WHERE block_id = %s::uuid", (pending.blocks[-1][0],)
        )
        with pytest.raises(fastload.RunChanged, match=run_id):
            fastload.load_pending_chunks(conn, pending)
    # a run the blocks do not cover comes with its arrays, whatever was asked
    _, arrays = fastload.load_requests_deferred(store_url, run_id)
    assert isinstance(arrays, m.ChunkArrays)


def test_incomplete_blocks_fall_back_to_the_arrays(store_url: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    records = _varied(run_id, 300)
    _write(store_url, run_id, records, tmp_path, 100)
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert packed.load_packed(conn, run_id) is not None
        # rows written without a block (an older writer): counts differ
        extra = dataclasses.replace(make_records(run_id, 1, start=5000)[0], shard_id="old")
        enc = copyenc.encode_requests([extra], False)
        copy = f"COPY requests ({', '.join(copyenc.REQUEST_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        with conn.cursor() as cur, cur.copy(copy) as cp:
            cp.write(enc)
        assert packed.load_packed(conn, run_id) is None
    fast, slow = _both(store_url, run_id)
    assert len(fast[0]) == 301
    _assert_same(fast, slow)
    with psycopg.connect(store_url, autocommit=True) as conn:
        # same count again, but one block lost and another stored twice: ids repeat
        conn.execute("DELETE FROM requests WHERE run_id = %s AND shard_id = 'old'", (run_id,))
        assert packed.load_packed(conn, run_id) is not None
        b1, b2 = (
            r[0]
            for r in conn.execute(
                "SELECT block_id FROM request_blocks WHERE run_id = %s ORDER BY block_id LIMIT 2",
                (run_id,),
            ).fetchall()
        )
        conn.execute(
            "INSERT INTO request_blocks SELECT run_id, gen_random_uuid(), scheduled_at, format, "
            "n_requests, n_chunks, body FROM request_blocks WHERE block_id = %s",
            (b1,),
        )
        conn.execute("DELETE FROM request_blocks WHERE block_id = %s", (b2,))
        assert packed.load_packed(conn, run_id) is None
    _assert_same(*_both(store_url, run_id))


def test_a_cached_load_counts_the_run_once_and_its_count_still_guards_the_blocks(
    store_url: str, tmp_path: Path
) -> None:
    """The cache's fingerprint counts the run's rows; the blocks' check takes that count
    instead of counting again (about 1 s a count at 10M requests). A row without a block still
    makes the load read the arrays."""
    run_id = str(uuid.uuid4())
    with psycopg.connect(store_url, autocommit=True) as conn:
        insert_run(conn, synthetic_run(run_id, per_level=0)[0])  # the run's row: ended
    _write(store_url, run_id, _varied(run_id, 300), tmp_path, 100)
    with psycopg.connect(store_url, autocommit=True, cursor_factory=StatementLog) as conn:
        StatementLog.SEEN.clear()
        df, got, hit = cache.load_run_deferred(store_url, run_id, directory=tmp_path, reader=conn)
        assert not hit and len(df) == 300
        assert isinstance(got, fastload.PendingChunks)  # read from the blocks
        counted = StatementLog.counts_of_requests()
        assert len(counted) == 1 and "max(scheduled_at)" in counted[0], counted  # its own
        extra = dataclasses.replace(make_records(run_id, 1, start=5000)[0], shard_id="old")
        copy = f"COPY requests ({', '.join(copyenc.REQUEST_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
        with conn.cursor() as cur, cur.copy(copy) as cp:  # a row written without a block
            cp.write(copyenc.encode_requests([extra], False))
        df, got, hit = cache.load_run_deferred(store_url, run_id, directory=tmp_path, reader=conn)
        assert not hit and len(df) == 301  # the fingerprint's count (301) against 300 in blocks
        assert isinstance(got, m.ChunkArrays)  # so the arrays were read
    _assert_same((df, got), fastload.load_requests_fast(store_url, run_id, packed=False))


@pytest.mark.timescale
def test_timescaledb_and_plain_postgresql_read_alike(
    plain_url: str, timescale_url: str, tmp_path: Path
) -> None:
    run_id = str(uuid.uuid4())
    records = _varied(run_id, 400)
    loaded = []
    for admin in (plain_url, timescale_url):
        db = FreshDatabase(admin)
        try:
            _write(db.url, run_id, records, tmp_path, 200)
            loaded.append(fastload.load_requests_fast(db.url, run_id, parallel=2))
        finally:
            db.drop()
    _assert_same(loaded[0], loaded[1])


def test_spool_files_of_the_previous_format_still_replay() -> None:
    enc = EncodedBatch(b"req", b"ticks", 3, 2, b"blocks")
    again = EncodedBatch.from_bytes(enc.to_bytes(), "x")
    assert again == enc
    old = b"PLSPOOL1" + (3).to_bytes(4, "big") + (2).to_bytes(4, "big")
    old += (3).to_bytes(8, "big") + (5).to_bytes(8, "big") + b"reqticks"
    assert EncodedBatch.from_bytes(old, "y") == EncodedBatch(b"req", b"ticks", 3, 2, b"", 1)


def test_a_run_without_blocks_can_be_packed_later(store_url: str, tmp_path: Path) -> None:
    from workers.store.backfill import pack_run

    run_id = str(uuid.uuid4())
    _write(store_url, run_id, _varied(run_id, 500), tmp_path, 500)
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute("DELETE FROM request_blocks WHERE run_id = %s", (run_id,))
        assert packed.load_packed(conn, run_id) is None
    assert pack_run(store_url, run_id, batch_rows=120) == 5
    with psycopg.connect(store_url) as conn:
        assert packed.load_packed(conn, run_id) is not None
    _assert_same(*_both(store_url, run_id))
