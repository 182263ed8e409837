"""The run cache: a hit returns the same data; a changed or unfinished run is read again."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.store import cache, fastload
from tests.analysis.storedata import insert_run, request_row, synthetic_run
from tests.support.stores import StatementLog

RID = "00000000-0000-0000-0000-0000000000ca"


@pytest.mark.integration
def test_hit_miss_and_invalidation(pg_conn: psycopg.Connection[Any], tmp_path: Path) -> None:
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu", "us"), fail_every=5, per_level=50))
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    df1, ch1, hit1 = cache.load_run_cached(url, RID, directory=tmp_path)
    df2, ch2, hit2 = cache.load_run_cached(url, RID, directory=tmp_path)
    assert (hit1, hit2) == (False, True)
    pd.testing.assert_frame_equal(df1, df2)
    for name in ("offsets_us", "tokens", "ptr"):
        assert np.array_equal(getattr(ch1, name), getattr(ch2, name))
    # one more row (a replayed batch, say): the entry no longer matches
    insert_more = request_row(RID, 999, outcome="cancelled")
    with pg_conn.cursor() as cur:
        cur.execute(
            "INSERT INTO requests (request_id, scheduled_at, run_id, shard_id, region, "
            "level, idx, phase, outcome, token_source) VALUES (%s, %s, %s, 's0', 'eu', "
            "0, 999, 'steady', 'cancelled', 'client')",
            (insert_more["request_id"], insert_more["scheduled_at"], RID),
        )
    df3, _, hit3 = cache.load_run_cached(url, RID, directory=tmp_path)
    assert not hit3 and len(df3) == len(df1) + 1
    # a run still going is never cached
    pg_conn.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (RID,))
    _, _, hit4 = cache.load_run_cached(url, RID, directory=tmp_path)
    _, _, hit5 = cache.load_run_cached(url, RID, directory=tmp_path)
    assert not hit4 and not hit5


@pytest.mark.integration
def test_the_entry_is_written_beside_the_caller_and_holds_the_loaded_run(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The caller goes on with the run in memory while its entry is written in a thread; what
    it does to its frame afterwards does not reach the entry, and a second reader in the same
    process waits for the entry rather than loading the run again."""
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu",), fail_every=7, per_level=40))
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    df1, _, hit1 = cache.load_run_cached(url, RID, directory=tmp_path)
    kept = df1.copy()
    df1["sent_ns"] = -1  # a page replacing a column, after the load
    df2, _, hit2 = cache.load_run_cached(url, RID, directory=tmp_path)
    assert (hit1, hit2) == (False, True)
    pd.testing.assert_frame_equal(df2, kept)
    cache.wait_for_writes()
    assert [p.name for p in tmp_path.glob("*/*")] == [RID]  # no half-written folder left


def test_a_failed_write_leaves_no_entry(tmp_path: Path) -> None:
    """A write that cannot finish (here: its folder's parent is a file) is logged, leaves
    nothing, and the caller is not troubled."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    df = pd.DataFrame({"x": np.arange(3)})
    chunks = cache.ChunkArrays(np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(4, np.int64))
    cache._save(blocker / "run", {"format": cache.FORMAT}, df, chunks)
    cache.wait_for_writes()
    assert [p.name for p in tmp_path.iterdir()] == ["not-a-folder"]


@pytest.mark.integration
def test_two_databases_with_the_same_run_id_keep_their_own_entries(
    store_admin_url: str, fresh_database: Any, tmp_path: Path
) -> None:
    """A run id is unique in one store, not across stores: each store's run is its own entry
    (before, the second database's run was read from the first one's entry)."""
    loaded = []
    for fail_every in (5, 3):
        db = fresh_database(store_admin_url)
        with psycopg.connect(db.url, autocommit=True) as conn:
            insert_run(conn, *synthetic_run(RID, regions=("eu",), fail_every=fail_every))
        for _ in range(2):
            df, _, hit = cache.load_run_cached(db.url, RID, directory=tmp_path)
            cache.wait_for_writes()
            loaded.append((hit, int((df["outcome"] != "ok").sum())))
    assert [hit for hit, _ in loaded] == [False, True, False, True]
    assert loaded[0][1] == loaded[1][1] != loaded[2][1] == loaded[3][1]
    assert len(list(tmp_path.glob("*/*"))) == 2


@pytest.mark.integration
def test_an_entry_removed_under_its_reader_is_a_miss(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    insert_run(pg_conn, *synthetic_run(RID, regions=("eu",), fail_every=4, per_level=20))
    df1, _, _ = cache.load_run_cached(pg_conn, RID, directory=tmp_path)
    cache.wait_for_writes()
    (entry,) = tmp_path.glob("*/*")
    (entry / cache.CHUNKS / "tokens.npy").unlink()  # another process rewriting it, say
    df2, _, hit = cache.load_run_cached(pg_conn, RID, directory=tmp_path)
    assert not hit
    pd.testing.assert_frame_equal(df2, df1)


@pytest.mark.integration
def test_a_deferred_load_keeps_the_frame_and_its_arrays_join_the_entry_later(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A page that needs no chunk array caches the frame alone (the blocks it read named in the
    entry); the arrays, read when a page needs them, join that entry, and the next reader of
    either kind gets them from disk, equal to a full load's."""
    from workers.store.backfill import pack_run

    insert_run(pg_conn, *synthetic_run(RID, regions=("eu", "us"), fail_every=5, per_level=50))
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    assert pack_run(url, RID, batch_rows=20) > 1
    full_df, full_ch = fastload.load_requests_fast(url, RID)
    df1, got1, hit1 = cache.load_run_deferred(url, RID, directory=tmp_path)
    cache.wait_for_writes()
    (entry,) = tmp_path.glob("*/*")
    assert not hit1 and isinstance(got1, fastload.PendingChunks)
    assert not (entry / cache.CHUNKS).exists()
    df2, got2, hit2 = cache.load_run_deferred(url, RID, directory=tmp_path)
    assert hit2 and isinstance(got2, fastload.PendingChunks)
    for df in (df1, df2):
        pd.testing.assert_frame_equal(df, full_df)
    ch = cache.load_chunks_cached(url, got2, directory=tmp_path)
    cache.wait_for_writes()
    assert (entry / cache.CHUNKS).is_dir()
    df3, got3, hit3 = cache.load_run_deferred(url, RID, directory=tmp_path)
    assert hit3 and isinstance(got3, cache.ChunkArrays)
    pd.testing.assert_frame_equal(df3, full_df)
    for arrays in (ch, got3):
        for name in ("offsets_us", "tokens", "ptr"):
            assert np.array_equal(getattr(arrays, name), getattr(full_ch, name)), name
    # a full reader of an entry still without its arrays reads them and completes the entry
    shutil.rmtree(entry / cache.CHUNKS)
    _, got4, hit4 = cache.load_run_cached(url, RID, directory=tmp_path)
    cache.wait_for_writes()
    assert hit4 and np.array_equal(got4.offsets_us, full_ch.offsets_us)
    assert (entry / cache.CHUNKS).is_dir()


@pytest.mark.integration
def test_a_count_read_with_the_run_row_is_not_counted_again(
    pg_conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """`rows` (the run row's `requests`, which a page has read already) stands for the
    fingerprint's count: the same fingerprint, no scan of the run's index; a count that no
    longer matches the kept entry is a miss, and the load still reads what the store holds."""
    rid = "00000000-0000-0000-0000-0000000000cb"
    insert_run(pg_conn, *synthetic_run(rid, regions=("eu",), per_level=40))
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    counted = cache.fingerprint(pg_conn, rid)
    assert counted is not None and counted["rows"] == 40
    assert cache.fingerprint(pg_conn, rid, rows=40) == counted
    with psycopg.connect(url, autocommit=True, cursor_factory=StatementLog) as conn:
        StatementLog.SEEN.clear()
        df, _, hit = cache.load_run_deferred(url, rid, directory=tmp_path, reader=conn, rows=40)
        assert not hit and len(df) == 40
        assert StatementLog.counts_of_requests() == [], StatementLog.SEEN
        _, _, hit = cache.load_run_deferred(url, rid, directory=tmp_path, reader=conn, rows=40)
        assert hit
        df, _, hit = cache.load_run_deferred(url, rid, directory=tmp_path, reader=conn, rows=41)
        assert not hit and len(df) == 40  # the store's rows, whatever count was handed in
    pg_conn.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (rid,))
    assert cache.fingerprint(pg_conn, rid, rows=40) is None  # a running run: never cached
