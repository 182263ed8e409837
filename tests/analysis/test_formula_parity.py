"""Each metric's SQL form (loadgen.results.formulas) gives the numbers its Python form gives, on the
same rows stored in TimescaleDB: analysis.metrics over the loaded frame, the record form the
saturation search samples by, and the SQL the nightly history and the per-region split run.
Edge rows: failed and unsent requests, no first token, one-token answers, a zero span,
reasoning before the answer, and offsets large enough for float rounding to show. And the
saturation search samples what `peakload sla` counts."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from analysis import metrics as m
from analysis.stats.regions import network_breakdown
from analysis.store.load import load_requests
from analysis.verdicts.sla import Claim, claim_samples
from loadgen.engine.fold import SAMPLED, sample_metrics
from loadgen.results import choices, formulas
from loadgen.results.records import Outcome, Phase, RequestRecord
from tests.analysis.storedata import (
    MS,
    frame,
    insert_run,
    level_row,
    request_row,
    run_row,
    streamed,
)

pytestmark = pytest.mark.integration

RUN = "00000000-0000-0000-0000-00000000f0a1"


def _rows() -> list[dict[str, Any]]:
    rows = [
        streamed(RUN, 0, sent_ns=0, offsets_us=[120_000, 150_000, 181_000], tokens=[1, 2, 1]),
        # one-token answer: no TPOT, no output speed
        streamed(RUN, 1, sent_ns=3 * MS, offsets_us=[77_777], tokens=[1]),
        # ok but no token at all (an empty answer): only E2E
        request_row(RUN, 2, sent_ns=1_234_567, end_ns=98_765_432, output_tokens=0),
        # failed before any token, and never sent
        request_row(RUN, 3, outcome="http_error", http_status=503, sent_ns=5, end_ns=4 * MS + 1),
        request_row(RUN, 4, outcome="not_sent", error_phase="max_concurrency", sent_ns=None),
        # a stream cut after three tokens: TTFT and TPOT from what arrived
        streamed(
            RUN,
            5,
            sent_ns=MS,
            offsets_us=[0, 40_001, 80_003, 99_999],
            tokens=[0, 1, 1, 1],
            outcome="stream_error",
        ),
        # reasoning first, the answer later
        streamed(
            RUN,
            6,
            sent_ns=0,
            offsets_us=[90_000, 300_000, 333_333],
            tokens=[1, 1, 5],
            first_answer_ns=300_000_000,
        ),
        # two tokens in one read: a zero span (TPOT 0, no output speed)
        request_row(
            RUN,
            7,
            sent_ns=2,
            first_token_ns=10_000_003,
            first_answer_ns=10_000_003,
            end_ns=10_000_003,
            output_tokens=2,
        ),
    ]
    # sent late in a long level: ns values where an inexact division would show
    rng = np.random.default_rng(17)
    for i in range(8, 208):
        sent = int(rng.integers(0, 3_600_000) * MS + rng.integers(0, MS))
        gaps = rng.integers(1, 90_000, size=int(rng.integers(1, 12)))
        offsets = (int(rng.integers(1_000, 3_000_000)) + np.r_[0, np.cumsum(gaps)[:-1]]).tolist()
        tokens = rng.integers(1, 4, size=len(offsets)).tolist()
        rows.append(
            streamed(RUN, i, sent_ns=sent, offsets_us=offsets, tokens=tokens, region=f"r{i % 3}")
        )
    # n = 3, interleaved, uneven gaps and tokens (deploy/sql/0190): TPOT per choice, then the
    # mean over the choices (loadgen/results/choices.py); choice 2 has one token, so no TPOT of its
    # own
    offs = [5_000, 5_001, 5_002, 27_345, 27_399, 61_111, 98_765]
    rows.append(
        streamed(
            RUN,
            CHOICE_ROW,
            sent_ns=7 * MS + 3,
            offsets_us=offs,
            tokens=[1, 2, 1, 3, 1, 1, 2],
            chunk_choices=[0, 1, 2, 0, 1, 0, 1],
        )
    )
    return rows


CHOICE_ROW = 208


@pytest.fixture
def stored(ts_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    insert_run(ts_conn, run_row(RUN), [level_row(RUN)], _rows())
    return ts_conn


def _sql_values(conn: psycopg.Connection[Any], expr: str) -> np.ndarray:
    query = sql.SQL("SELECT ({})::float8 FROM requests WHERE run_id = %s ORDER BY idx").format(
        sql.SQL(expr)
    )
    values = [r[0] for r in conn.execute(query, (RUN,)).fetchall()]
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


@pytest.mark.parametrize("name", sorted(formulas.REQUEST_METRICS))
def test_sql_form_equals_python_form(stored: psycopg.Connection[Any], name: str) -> None:
    metric = formulas.REQUEST_METRICS[name]
    df = load_requests(stored, RUN).sort_values("idx", ignore_index=True)
    python = m.per_request_values(df, name)
    in_sql = _sql_values(stored, metric.sql)
    # the same numbers, bit for bit, and NULL exactly where Python has no value
    assert np.array_equal(np.isnan(python), np.isnan(in_sql))
    assert np.array_equal(python, in_sql, equal_nan=True)
    # the form the saturation search samples records by (None for NULL)
    records = [
        types.SimpleNamespace(**{c: (None if np.isnan(x) else int(x)) for c, x in r.items()})
        for r in df[list(metric.columns)].to_dict("records")
    ]
    by_record = np.array([metric.of_record(r) for r in records])
    if name == "tpot_ms":  # n > 1: per choice (the record form the search samples by)
        row = df.loc[CHOICE_ROW]
        by_record[CHOICE_ROW] = choices.request_tpot_ms(
            row["chunk_offsets_us"], row["chunk_tokens"], row["chunk_choices"]
        )
        assert by_record[CHOICE_ROW] == pytest.approx(
            ((61_111 - 5_000) / 4 + (98_765 - 5_001) / 4) / 2 / 1e3
        )
    assert np.array_equal(by_record, python, equal_nan=True)
    # the edge rows have (or lack) values as the formulas say
    has = ~np.isnan(python[:8])
    expected = {
        "ttft_ms": [1, 1, 0, 0, 0, 1, 1, 1],
        "ttft_sched_ms": [1, 1, 0, 0, 0, 1, 1, 1],
        "ttfat_ms": [1, 1, 0, 0, 0, 1, 1, 1],
        "tpot_ms": [1, 0, 0, 0, 0, 1, 1, 1],
        "output_speed_tps": [1, 0, 0, 0, 0, 1, 1, 0],
        "e2e_ms": [1, 1, 1, 1, 0, 1, 1, 1],
        "e2e_sched_ms": [1, 1, 1, 1, 0, 1, 1, 1],
    }[name]
    assert has.astype(int).tolist() == expected


def test_per_token_itl_is_one_formula(stored: psycopg.Connection[Any]) -> None:
    df = load_requests(stored, RUN).sort_values("idx", ignore_index=True)
    per_request = [
        formulas.itl_per_token_ms(o, k, c)
        for o, k, c in zip(
            df["chunk_offsets_us"], df["chunk_tokens"], df["chunk_choices"], strict=True
        )
    ]
    flat = m.itl_per_token_ms(m.ChunkArrays.from_frame(df))
    assert np.array_equal(flat, np.concatenate(per_request))
    # the zero-token first chunk of row 5 has no gap; row 6's 5-token chunk gives 5 samples
    assert per_request[5].tolist() == [40_002 / 1 / 1e3, 19_996 / 1 / 1e3]
    assert per_request[6].tolist() == [210.0] + [(333_333 - 300_000) / 5 / 1e3] * 5
    # n = 3: gaps within each choice (0: 5000 -> 27345 -> 61111; 1: 5001 -> 27399 -> 98765)
    want = [22.345 / 3] * 3 + [33.766] + [22.398] + [71.366 / 2] * 2
    assert per_request[CHOICE_ROW].tolist() == pytest.approx(want)


def test_region_ttft_median_in_sql(stored: psycopg.Connection[Any]) -> None:
    with stored.cursor() as cur:
        cur.execute(
            "INSERT INTO shards (run_id, shard_id, region, plan, network_rtt_ns) "
            "SELECT %s, 's-' || r, r, '{}'::jsonb, 1234567 "
            "FROM unnest(ARRAY['local', 'r0', 'r1', 'r2']) AS r",
            (RUN,),
        )
    df = load_requests(stored, RUN)
    ok = (df["outcome"] == "ok") & df["first_token_ns"].notna() & df["sent_ns"].notna()
    rows = network_breakdown(stored, RUN)
    assert [r["region"] for r in rows] == ["local", "r0", "r1", "r2"]
    for row in rows:
        sub = df[ok & (df["region"] == row["region"])]
        assert row["requests_ok"] == len(sub)
        # percentile_cont interpolates as numpy's linear method (to rounding)
        p50 = m.percentile(m.ttft_ms(sub), 50.0)
        assert row["ttft_p50_ms"] == pytest.approx(p50, rel=1e-12)
        assert row["server_time_ms"] == pytest.approx(p50 - 1.234567, rel=1e-12)


def test_the_search_samples_what_sla_counts() -> None:
    # the saturation search (loadgen.engine.fold.sample_metrics) and `peakload sla`
    # (analysis.verdicts.sla.claim_samples) take the same samples from the same requests
    rows = _rows()
    samples: dict[str, list[float]] = {name: [] for name in SAMPLED}
    for r in rows:
        rec = RequestRecord(
            request_id=r["request_id"],
            run_id=RUN,
            shard_id=r["shard_id"],
            region=r["region"],
            level=r["level"],
            index=r["idx"],
            scheduled_at_ns=0,
            phase=Phase(r["phase"]),
            outcome=Outcome(r["outcome"]),
            **{c: r[c] for c in ("sent_ns", "first_token_ns", "first_answer_ns", "end_ns")},
            output_tokens=r["output_tokens"],
            chunk_offsets_us=list(r["chunk_offsets_us"]),
            chunk_tokens=list(r["chunk_tokens"]),
            chunk_choices=list(r["chunk_choices"] or []),
        )
        sample_metrics(samples, rec)
    df = frame(rows)
    for name in SAMPLED:
        values, misses = claim_samples(df, Claim(metric=name, percentile=99, threshold=1))
        got = np.asarray(samples[name])
        assert int(np.isinf(got).sum()) == misses == 3  # the 503, the unsent, the cut stream
        assert np.array_equal(np.sort(got[np.isfinite(got)]), np.sort(values)), name
