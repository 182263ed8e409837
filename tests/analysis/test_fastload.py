"""The binary-COPY loader gives the same rows, arrays and numbers as load_requests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis import metrics as m
from analysis.reports.summary import level_summary
from analysis.store import fastload, load
from tests.analysis.storedata import insert_run, request_row, synthetic_run

RID = "00000000-0000-0000-0000-0000000000d9"


@pytest.mark.integration
def test_same_as_load_requests(
    pg_conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, levels, reqs, ticks = synthetic_run(
        RID,
        levels=(("rate", 2.0), ("concurrency", 4.0)),
        regions=("eu", "us"),
        fail_every=4,
        reasoning=True,
        per_level=150,
    )
    reqs.append(
        request_row(
            RID,
            10_000,
            outcome="not_sent",
            error_phase="run_ended",
            sent_ns=None,
            prompt_tokens=None,
            region="eu",
        )
    )
    insert_run(pg_conn, run, levels, reqs, ticks)
    monkeypatch.setattr(fastload, "_BLOCK_BYTES", 4096)  # many blocks, rows split across them
    fast, chunks = fastload.load_requests_fast(pg_conn, RID)
    slow = load.load_requests(pg_conn, RID)
    assert len(fast) == len(slow) == 301
    order = np.argsort(fast["idx"].to_numpy())
    f = fast.iloc[order].reset_index(drop=True)
    s = slow.sort_values("idx").reset_index(drop=True)
    for col in f.columns:
        left = f[col].astype(object) if isinstance(f[col].dtype, pd.CategoricalDtype) else f[col]
        right = s[col]
        if right.isna().all():  # a text column no row has (adapter): None or NaN, both missing
            assert left.isna().all(), col
            continue
        pd.testing.assert_series_equal(left, right, check_dtype=False, check_names=False, obj=col)
    slow_chunks = m.ChunkArrays.from_frame(s)
    lengths = np.diff(chunks.ptr)[order]
    assert lengths.tolist() == np.diff(slow_chunks.ptr).tolist()
    offs = [chunks.offsets_us[chunks.ptr[i] : chunks.ptr[i + 1]].tolist() for i in order]
    toks = [chunks.tokens[chunks.ptr[i] : chunks.ptr[i + 1]].tolist() for i in order]
    assert offs == [a.tolist() for a in s["chunk_offsets_us"]]
    assert toks == [a.tolist() for a in s["chunk_tokens"]]
    # and the same summary, whatever the row order
    lv = load.load_levels(pg_conn, RID)
    r = load.load_run(pg_conn, RID)
    assert level_summary(fast, lv, r, chunks=chunks) == level_summary(slow, lv, r)


@pytest.mark.integration
def test_parallel_empty_and_unaligned(pg_conn: psycopg.Connection[Any]) -> None:
    run, levels, reqs, ticks = synthetic_run(RID, regions=("eu", "us"), fail_every=3, per_level=40)
    insert_run(pg_conn, run, levels, reqs, ticks)
    one, ch1 = fastload.load_requests_fast(pg_conn, RID)
    url = pg_conn.peakload_url  # type: ignore[attr-defined]
    three, ch3 = fastload.load_requests_fast(url, RID, parallel=3)
    key1, key3 = np.argsort(one["idx"].to_numpy()), np.argsort(three["idx"].to_numpy())
    assert one["idx"].to_numpy()[key1].tolist() == three["idx"].to_numpy()[key3].tolist()
    assert [ch1.offsets_us[ch1.ptr[i] : ch1.ptr[i + 1]].tolist() for i in key1] == [
        ch3.offsets_us[ch3.ptr[i] : ch3.ptr[i + 1]].tolist() for i in key3
    ]
    empty, ch0 = fastload.load_requests_fast(pg_conn, "00000000-0000-0000-0000-00000000ffff")
    assert len(empty) == 0 and ch0.n_requests == 0
    # a stream cut into messages that do not follow rows is walked row by row instead
    dicts = fastload._dictionaries(pg_conn, RID)
    with pg_conn.cursor() as cur, cur.copy(fastload._query(RID, dicts, 0, 1).decode()) as cp:
        stream = b"".join(bytes(b) for b in cp)
    pieces = [stream[i : i + 777] for i in range(0, len(stream), 777)]
    walked = fastload._parse_messages(pieces, True, final=True)
    aligned = fastload._read_partition(pg_conn, fastload._query(RID, dicts, 0, 1))
    assert len(walked) == 1 and all(
        np.array_equal(a, b) for a, b in zip(walked[0], aligned[0], strict=True)
    )


@pytest.mark.integration
def test_runs_of_equal_rows(pg_conn: psycopg.Connection[Any]) -> None:
    # equal chunk counts in long runs take the strided path; a failure with no chunks
    # every 50 rows breaks the runs
    from tests.analysis.storedata import level_row, run_row, streamed

    reqs = [
        request_row(RID, i, outcome="http_error", http_status=429, end_ns=1000)
        if i % 50 == 49
        else streamed(
            RID,
            i,
            sent_ns=i,
            offsets_us=[1000 * (k + 1) + i for k in range(16)],
            tokens=[1 + (k % 3 == 2) for k in range(16)],
        )
        for i in range(400)
    ]
    insert_run(pg_conn, run_row(RID), [level_row(RID)], reqs)
    fast, chunks = fastload.load_requests_fast(pg_conn, RID)
    slow = load.load_requests(pg_conn, RID)
    order = np.argsort(fast["idx"].to_numpy())
    s = slow.sort_values("idx").reset_index(drop=True)
    assert fast["sent_ns"].to_numpy()[order].tolist() == s["sent_ns"].tolist()
    assert fast["http_status"].to_numpy()[order][49] == 429.0
    assert [chunks.offsets_us[chunks.ptr[i] : chunks.ptr[i + 1]].tolist() for i in order] == [
        a.tolist() for a in s["chunk_offsets_us"]
    ]
    assert [chunks.tokens[chunks.ptr[i] : chunks.ptr[i + 1]].tolist() for i in order] == [
        a.tolist() for a in s["chunk_tokens"]
    ]
