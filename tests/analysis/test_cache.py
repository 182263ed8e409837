"""The run cache: a hit returns the same data; a changed or unfinished run is read again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import pytest

from analysis.store import cache
from tests.analysis.storedata import insert_run, request_row, synthetic_run

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
