"""Distribution faults (RELIABILITY.md C1-C5, D3) with real worker processes, Redis and
PostgreSQL: a killed pool child and a killed worker, a shard outliving the visibility timeout
plus a duplicated task, Redis killed and restarted mid-run, a missing worker, a soft time limit,
and the database unreachable from a worker mid-run (it spools and replays, the ledger holds)."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support.celery_workers import Cluster, RedisServer, SimServer
from tests.support.stores import host_port, with_hostport
from tests.support.tcpproxy import TcpProxy
from tests.workers.distributed.helpers import (
    coordinator,
    killed_shard_rows,
    ledger,
    make_spec,
    run_status,
    shards,
    wait_for,
)
from workers.app import TASK_RUN_SHARD, region_queue
from workers.coordinator import SubmitOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _rows(conn: psycopg.Connection[tuple[object, ...]], run_id: str, shard_id: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM requests WHERE run_id = %s AND shard_id = %s", (run_id, shard_id)
    ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture(autouse=True)
def _allow_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")


def test_c1_killed_pool_child_and_killed_worker(
    cluster: Cluster, cluster_env: dict[str, str], sim_server: SimServer
) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    cluster.start("c")
    spec = make_spec(
        sim_server.base_url, [("a", 0.34), ("b", 0.33), ("c", 0.33)], rate=15, duration_s=6
    )
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    url = cluster_env["PEAKLOAD_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(
            lambda: (
                _rows(conn, launch.run_id, "a-0") >= 3 and _rows(conn, launch.run_id, "b-0") >= 3
            ),
            15,
            "rows from a-0 and b-0",
        )
        (child,) = a.children()
        child.kill()  # SIGKILL one pool child: the master lives on and forks a new one
        b.kill()  # SIGKILL the whole worker of region b
        status = coord.wait(launch.run_id, timeout_s=60)
        assert status == "partial", run_status(conn, launch.run_id)
        rows = shards(conn, launch.run_id)
        assert rows["a-0"]["state"] == "interrupted"
        assert rows["b-0"]["state"] == "interrupted"
        assert rows["c-0"]["state"] == "completed"
        assert all(r["fencing_token"] == 1 for r in rows.values())  # nothing ran twice
        assert killed_shard_rows(conn, launch.run_id, "a-0") >= 3  # written rows survive
        assert killed_shard_rows(conn, launch.run_id, "b-0") >= 3
        ledger(conn, launch.run_id, ["c-0"], killed=("a-0", "b-0"))
        _, reason = run_status(conn, launch.run_id)
        assert reason is not None and "a-0: interrupted" in reason and "b-0: interrupted" in reason
    # the surviving worker of region a took no second copy of its shard
    assert "refused: already" not in a.log()


def test_c2_shard_longer_than_visibility_timeout_runs_once(
    cluster: Cluster, cluster_env: dict[str, str], sim_server: SimServer
) -> None:
    vt = {"PEAKLOAD_VISIBILITY_TIMEOUT_S": "1"}
    w = cluster.start("a", concurrency=2, extra_env=vt)
    spec = make_spec(sim_server.base_url, [("a", 1.0)], rate=5, duration_s=5)
    coord = coordinator(cluster_env, visibility_timeout_s=1)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    # a duplicate of the same shard task arrives mid-run (a restored queue, a re-send)
    coord.app.send_task(TASK_RUN_SHARD, args=[launch.plans[0].to_json()], queue=region_queue("a"))
    assert coord.wait(launch.run_id, timeout_s=60) == "completed"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        (row,) = shards(conn, launch.run_id).values()
        assert row["fencing_token"] == 1 and row["state"] == "completed"
        n = ledger(conn, launch.run_id, ["a-0"])
        assert 20 <= n <= 30
    refusal = "refused: already"
    wait_for(lambda: refusal in w.log(), 10, "the duplicate's refusal in the worker log")
    assert w.log().count(refusal) == 1


def test_c3_redis_killed_and_restarted_mid_run(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    redis_server: RedisServer,
) -> None:
    cluster.start("a")
    spec = make_spec(sim_server.base_url, [("a", 1.0)], rate=8, duration_s=6)
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    time.sleep(1.0)
    redis_server.kill()
    time.sleep(3.0)
    redis_server.start()
    restarted = time.monotonic()
    # the data path to the store never went through Redis: the shard completes whole
    assert coord.wait(launch.run_id, timeout_s=60) == "completed"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        ledger(conn, launch.run_id, ["a-0"])
    # the worker is back on the broker: a new run is picked up within 30 s of the restart
    again = coord.submit(
        make_spec(sim_server.base_url, [("a", 1.0)], rate=5, duration_s=1),
        SubmitOptions(ready_timeout_s=30),
    )
    assert again.started, again.reason
    assert time.monotonic() - restarted < 30
    assert coord.wait(again.run_id, timeout_s=30) == "completed"


def test_c4_missing_worker_aborts_the_start_with_a_reason(
    cluster: Cluster, cluster_env: dict[str, str], sim_server: SimServer
) -> None:
    cluster.start("eu")  # nobody consumes region.us
    spec = make_spec(sim_server.base_url, [("eu", 0.5), ("us", 0.5)], rate=10, duration_s=2)
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=4))
    assert not launch.started
    assert launch.reason is not None and "us-0 (planned)" in launch.reason
    assert coord.wait(launch.run_id, timeout_s=30) == "aborted"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        rows = shards(conn, launch.run_id)
        assert rows["eu-0"]["state"] == "aborted" and rows["us-0"]["state"] == "aborted"
        assert rows["eu-0"]["start_skew_ns"] is None  # never started
        n = conn.execute(
            "SELECT count(*) FROM requests WHERE run_id = %s", (launch.run_id,)
        ).fetchone()
        assert n is not None and n[0] == 0  # not a single request went out
        status, reason = run_status(conn, launch.run_id)
        assert status == "aborted" and reason is not None and "not ready" in reason


def test_c5_soft_time_limit_flushes_and_marks_timed_out(
    cluster: Cluster, cluster_env: dict[str, str], sim_server: SimServer
) -> None:
    w = cluster.start("a")
    spec = make_spec(sim_server.base_url, [("a", 1.0)], rate=8, duration_s=12)
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30, soft_limit_s=8))
    assert launch.started, launch.reason
    assert coord.wait(launch.run_id, timeout_s=60) == "partial"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        (row,) = shards(conn, launch.run_id).values()
        assert row["state"] == "timed_out"
        n = ledger(conn, launch.run_id, ["a-0"])
        assert 0 < n < 8 * 12  # cut short, everything scheduled so far kept
        assert row["records_written"] == n
    assert w.proc.poll() is None  # a soft stop, not a hard kill


def test_d3_database_outage_mid_run_spools_and_replays(
    cluster: Cluster, cluster_env: dict[str, str], sim_server: SimServer
) -> None:
    url = cluster_env["PEAKLOAD_DATABASE_URL"]
    host, port = host_port(url)
    with TcpProxy(host, port) as pg:
        # the worker reaches PostgreSQL only through the proxy; its lease outlasts the outage
        cluster.start(
            "a",
            extra_env={
                "PEAKLOAD_DATABASE_URL": with_hostport(url, "127.0.0.1", pg.port),
                "PEAKLOAD_LEASE_TTL_S": "20",
            },
        )
        spec = make_spec(sim_server.base_url, [("a", 1.0)], rate=8, duration_s=8)
        coord = coordinator(cluster_env)
        launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
        assert launch.started, launch.reason
        time.sleep(1.5)
        pg.pause()
        pg.reset_all()
        time.sleep(6.0)
        pg.resume()
        status = coord.wait(launch.run_id, timeout_s=90)
        assert status == "completed", cluster.logs()[-4000:]
    with psycopg.connect(url, autocommit=True) as conn:
        n = ledger(conn, launch.run_id, ["a-0"])
        assert 55 <= n <= 70
