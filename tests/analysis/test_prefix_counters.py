"""vLLM's prefix-cache counters per level, from scraped server_metrics rows in a real store:
the increase inside each level's steady span, summed over label sets, and hits / queries."""

from __future__ import annotations

import json
import uuid

import pandas as pd
import psycopg
import pytest

from analysis.stats.prefix_counters import level_prefix_counters

pytestmark = pytest.mark.integration


def test_counters_increase_over_each_level_span(store_url: str) -> None:
    run_id = str(uuid.uuid4())
    t0 = pd.Timestamp("2026-12-01T00:00:00Z")
    rows = []
    for s in range(0, 21):  # one scrape a second; two label sets (two engines' shares)
        for eng, rate in (("0", 1.0), ("1", 3.0)):
            t = t0 + pd.Timedelta(seconds=s)
            labels = json.dumps({"engine": eng})
            rows.append((t, "vllm:prefix_cache_queries_total", labels, 100.0 * s * rate))
            rows.append((t, "vllm:prefix_cache_hits_total", labels, 25.0 * s * rate))
    with psycopg.connect(store_url) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO server_metrics (t, run_id, source, name, labels, value) "
                "VALUES (%s, %s, 'http://127.0.0.1:1/metrics', %s, %s::jsonb, %s)",
                [(t, run_id, n, lab, v) for t, n, lab, v in rows],
            )
        conn.commit()
        df = pd.DataFrame(
            {
                "level": [0, 0, 1, 1],
                "phase": ["steady"] * 4,
                "scheduled_at": [t0 + pd.Timedelta(seconds=s) for s in (2, 8, 12, 18)],
                "end_ns": [0.0] * 4,
            }
        )
        got = level_prefix_counters(conn, run_id, df)
        assert level_prefix_counters(conn, str(uuid.uuid4()), df) == {}
    assert set(got) == {"0", "1"}
    for lv in ("0", "1"):  # 6 s of span at (1 + 3) * 100 queries/s, a quarter hit
        assert got[lv]["queries"] == pytest.approx(2400.0)
        assert got[lv]["hit_rate"] == pytest.approx(0.25)
