"""Pacing against a simulated provider's rate limit (sim preset `hosted`: 20 requests/s, burst
20): offered 30 requests/s, unpaced the run collects 429s (each a record, with Retry-After);
paced at 20/s x 0.9 headroom it gets no 429 beyond the first, and the records show the wait."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from loadgen.spec import spec_from_dict
from tests.support.sim import start_sim
from workers.local import run_local

pytestmark = pytest.mark.integration

RELAXED = {
    "max_loop_lag_p99_ms": 10_000.0,
    "max_dispatch_delay_p99_ms": 10_000.0,
    "max_cpu_percent": 10_000.0,
}


def _spec(base_url: str, pacing: dict[str, object]) -> object:
    return spec_from_dict(
        {
            "name": "paced",
            "target": {"api": "openai-chat", "base_url": base_url, "model": "m"},
            "workload": {"prompt_tokens": 16, "output_tokens": 8},
            "load": {"rate": [30.0], "arrival": "constant", "duration_s": 4.0},
            "pacing": pacing,
            "validity": RELAXED,
        }
    )


def test_pacing_keeps_under_the_providers_limit(store_url: str, tmp_path: Path) -> None:
    with start_sim(["--preset", "hosted"], tmp_path) as sim:
        unpaced = run_local(_spec(sim.base_url, {}), database_url=store_url).run_id  # type: ignore[arg-type]
        paced = run_local(
            _spec(sim.base_url, {"enabled": True, "requests_per_minute": 1200}),  # type: ignore[arg-type]
            database_url=store_url,
        ).run_id
    with psycopg.connect(store_url) as conn:

        def counts(rid: str) -> tuple[int, int, int, float]:
            row = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE http_status = 429), "
                "count(*) FILTER (WHERE http_status = 429 AND retry_after_s IS NOT NULL), "
                "COALESCE(max(sent_ns) / 1e9, 0) FROM requests WHERE run_id = %s",
                (rid,),
            ).fetchone()
            assert row is not None
            return int(row[0]), int(row[1]), int(row[2]), float(row[3])

        n_u, r429_u, ra_u, _ = counts(unpaced)
        n_p, r429_p, _, late_p = counts(paced)
    assert n_u == n_p == 120  # every scheduled request is a record, paced or not
    assert r429_u >= 20 and ra_u == r429_u  # 30/s into 20/s: 429s, each with its Retry-After
    assert r429_p <= 1
    # 120 requests at 18/s take 6.7 s to send: the last waited about 2.7 s past its schedule
    assert late_p > 2.0


def test_retries_are_separate_attempts_on_the_original_schedule(
    store_url: str, tmp_path: Path
) -> None:
    from loadgen.records import make_request_id

    with start_sim(["--preset", "hosted"], tmp_path) as sim:
        spec = _spec(sim.base_url, {"retries": 3})
        run = run_local(spec, database_url=store_url)  # type: ignore[arg-type]
    assert run.status == "completed" and run.requests_scheduled == 120
    rid = run.run_id
    with psycopg.connect(store_url) as conn:
        rows = conn.execute(
            "SELECT request_id::text, shard_id, idx, attempt, scheduled_at, http_status, sent_ns "
            "FROM requests WHERE run_id = %s ORDER BY idx, attempt",
            (rid,),
        ).fetchall()
    first = {(r[1], r[2]): r for r in rows if r[3] == 0}
    retries = [r for r in rows if r[3] > 0]
    assert len(first) == 120  # one first attempt per scheduled request
    assert retries, "30/s into 20/s: some 429s were retried"
    for req_id, shard, idx, attempt, sched, _status, sent in retries:
        assert req_id == make_request_id(rid, shard, idx, attempt)
        prev = next(r for r in rows if (r[1], r[2], r[3]) == (shard, idx, attempt - 1))
        assert prev[5] == 429  # only a 429 is retried
        assert sched == first[(shard, idx)][4]  # tied to the original schedule
        assert sent > prev[6]  # sent later, measured from that schedule
    # a retried request's last attempt is its answer: at most 3 retries, most end ok
    last = {(r[1], r[2]): r for r in rows}
    assert all(r[3] <= 3 for r in last.values())
    assert sum(r[5] == 200 for r in last.values()) > sum(r[5] == 200 for r in first.values())
