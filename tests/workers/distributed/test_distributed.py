"""Distributed runs end to end: real Redis, real `celery worker` processes (prefork), the
simulated engine, real PostgreSQL. The ledger check ends every test."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.celery_workers import Cluster, SimServer
from tests.workers.distributed.helpers import coordinator, ledger, make_spec, run_status, shards
from workers.coordinator import SubmitOptions
from workers.progress import network_breakdown

pytestmark = [pytest.mark.integration]


def test_two_regions_run_synchronized_and_complete(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    cluster.start("eu", concurrency=1)
    cluster.start("us", concurrency=1)
    spec = make_spec(sim_server.base_url, [("eu", 0.5), ("us", 0.5)], rate=10, duration_s=3)
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    status = coord.wait(launch.run_id, timeout_s=60)
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        assert status == "completed", run_status(conn, launch.run_id)
        rows = shards(conn, launch.run_id)
        assert {s: r["state"] for s, r in rows.items()} == {
            "eu-0": "completed",
            "us-0": "completed",
        }
        for r in rows.values():
            assert r["fencing_token"] == 1
            assert r["start_skew_ns"] is not None and 0 <= r["start_skew_ns"] < 100_000_000
            assert r["clock_uncertainty_ns"] is not None and r["clock_uncertainty_ns"] < 5_000_000
            assert r["network_rtt_ns"] is not None
            assert r["records_written"] == r["requests_scheduled"] > 0
        n = ledger(conn, launch.run_id, ["eu-0", "us-0"])
        assert 25 <= n <= 35  # 10 req/s for 3 s, split across two regions
        net = network_breakdown(conn, launch.run_id)
        assert [r["region"] for r in net] == ["eu", "us"]
        assert all(r["ttft_p50_ms"] is not None and r["ttft_p50_ms"] >= 15 for r in net)
        levels: Any = conn.execute(
            "SELECT started_at, ended_at FROM run_levels WHERE run_id = %s", (launch.run_id,)
        ).fetchall()
        assert len(levels) == 1 and levels[0][0] is not None and levels[0][1] > levels[0][0]
