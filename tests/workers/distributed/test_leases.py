"""Fencing leases and run control on a real PostgreSQL: one claim wins, fenced writes, reaping,
final run status; the clock offset against a real Redis."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
import redis

from loadgen.errors import StoreError
from tests.support.stores import host_port, with_hostport
from tests.support.tcpproxy import TcpProxy
from workers import leases, runctl
from workers.app import make_app
from workers.clocks import measure_offset, reference_now_ns
from workers.coordinator import Coordinator

pytestmark = pytest.mark.integration


def _make_run(conn: psycopg.Connection[Any], shards: list[str]) -> str:
    run_id = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO runs (run_id, name, mode, api, target_url, model, spec) "
        "VALUES (%s, 't', 'distributed', 'openai-chat', 'http://127.0.0.1:9/v1', 'm', '{}')",
        (run_id,),
    )
    for s in shards:
        conn.execute(
            "INSERT INTO shards (run_id, shard_id, region, plan) VALUES (%s, %s, 'r', %s)",
            (run_id, s, json.dumps({})),
        )
    return run_id


def test_one_claim_wins_among_concurrent_claimers(store_url: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        run_id = _make_run(conn, ["r-0"])
    got: list[leases.Lease | None] = []
    barrier = threading.Barrier(6)

    def claim(i: int) -> None:
        with psycopg.connect(store_url, autocommit=True) as c:
            barrier.wait()
            got.append(leases.claim_shard(c, run_id, "r-0", f"w{i}", host="h", pid=i))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [g for g in got if g is not None]
    assert len(winners) == 1
    assert winners[0].token == 1


def test_fenced_out_after_reap_and_final_status(store_url: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        run_id = _make_run(conn, ["r-0", "r-1"])
        a = leases.claim_shard(conn, run_id, "r-0", "a", host="h", pid=1, ttl_s=0.2)
        b = leases.claim_shard(conn, run_id, "r-1", "b", host="h", pid=2, ttl_s=30)
        assert a is not None and b is not None
        assert leases.mark_ready(
            conn,
            b,
            clock_offset_ns=0,
            clock_uncertainty_ns=7_000_000,
            clock_suspect=True,
            network_rtt_ns=None,
            connect_ns=None,
            extra={},
        )
        assert runctl.finalize_run(conn, run_id) is None  # shards still active
        time.sleep(0.4)
        assert leases.reap_expired(conn, run_id) == [(run_id, "r-0")]
        # the dead worker comes back: every fenced write is refused
        assert not leases.renew_lease(conn, a)
        assert not leases.finish_shard(conn, a, "completed", records_written=5)
        assert leases.shard_state(conn, run_id, "r-0") == "interrupted"
        started_ref_ns = 1_767_225_600_123_456_000  # 2026-01-01 00:00:00.123456 UTC
        assert leases.mark_running(conn, b, start_skew_ns=10, started_ref_ns=started_ref_ns)
        started = conn.execute(
            "SELECT started_at FROM shards WHERE run_id = %s AND shard_id = 'r-1'", (run_id,)
        ).fetchone()
        assert started is not None  # the instant the shard noted, not when the store heard of it
        assert started[0] == dt.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC)
        assert leases.finish_shard(conn, b, "completed", requests_scheduled=3, valid=True)
        assert runctl.finalize_run(conn, run_id) == "partial"
        row = conn.execute(
            "SELECT status, status_reason, ended_at IS NOT NULL FROM runs WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert row is not None and row[0] == "partial" and row[2]
        assert "r-0: interrupted" in row[1]
        assert "r-1: clock offset uncertain (±7.0 ms)" in row[1]
        # a second claim of a finished shard is refused
        assert leases.claim_shard(conn, run_id, "r-1", "c", host="h", pid=3) is None


def test_abort_before_claim_refuses_claims(store_url: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        run_id = _make_run(conn, ["r-0", "r-1"])
        a = leases.claim_shard(conn, run_id, "r-0", "a", host="h", pid=1)
        assert a is not None
        assert runctl.request_abort(conn, run_id, "operator said so")
        assert leases.claim_shard(conn, run_id, "r-1", "b", host="h", pid=2) is None
        assert leases.shard_state(conn, run_id, "r-1") == "aborted"
        ctl = runctl.read_control(conn, run_id)
        assert ctl is not None and ctl.abort_requested and ctl.abort_reason == "operator said so"
        assert not runctl.set_start(conn, run_id, 123)
        assert leases.finish_shard(conn, a, "aborted", reason="run aborted")
        assert runctl.finalize_run(conn, run_id) == "aborted"
        assert runctl.finalize_run(conn, run_id) == "aborted"  # idempotent


def test_decide_status() -> None:
    assert runctl.decide_status(["completed", "completed"], False) == "completed"
    assert runctl.decide_status(["completed", "running"], False) is None
    assert runctl.decide_status(["planned"], False) is None
    assert runctl.decide_status(["failed", "failed"], False) == "failed"
    assert runctl.decide_status(["completed", "timed_out"], False) == "partial"
    assert runctl.decide_status(["aborted", "completed"], True) == "aborted"


@pytest.mark.serial  # a clock offset within 2 ms of its uncertainty: the cores alone
def test_clock_offset_against_redis() -> None:
    r = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=2)
    try:
        r.ping()
    except redis.RedisError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    with r:
        est = measure_offset(r, probes=8)
        # same host: Redis TIME is this machine's wall clock, so the true wall offset is 0
        assert abs(est.offset_wall_ns) <= est.uncertainty_ns + 2_000_000
        assert 0 < est.rtt_ns < 1_000_000_000 and not est.suspect
        now_ref = reference_now_ns(r)
        mono = est.ref_to_mono(now_ref)
        assert abs(mono - time.perf_counter_ns()) < 50_000_000
    with pytest.raises(ValueError, match="probes"):
        measure_offset(r, probes=0)


def test_a_slow_reference_path_marks_the_clock_suspect() -> None:
    """Redis behind a proxy adding 10 ms each way: the best probe's half round trip is past the
    5 ms bound, so the estimate is flagged, and its offset stays within that uncertainty."""
    from tests.support.tcpproxy import TcpProxy

    with TcpProxy("127.0.0.1", 6379, latency_ms=10) as proxy:
        r = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=5)
        try:
            r.ping()
        except redis.RedisError:
            pytest.skip("no Redis on 127.0.0.1:6379")
        with r:
            est = measure_offset(r, probes=4)
    assert est.rtt_ns >= 20_000_000
    assert est.suspect
    assert abs(est.offset_wall_ns) <= est.uncertainty_ns


def test_a_wait_for_the_run_s_end_rides_through_a_store_outage(store_url: str) -> None:
    """`submit`'s wait (Coordinator.wait) while the store is cut: it reconnects and returns the
    run's end once the store is back, instead of failing while every shard goes on (the fleet
    test's TimescaleDB restart found it failing on the first refused connection)."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        run_id = _make_run(conn, ["r-0"])
        lease = leases.claim_shard(conn, run_id, "r-0", "w", host="h", pid=1, ttl_s=60)
        assert lease is not None
    host, port = host_port(store_url)
    out: list[object] = []
    with TcpProxy(host, port) as proxy:
        redis_url = "redis://127.0.0.1:1/0"  # the wait never uses it
        coord = Coordinator(
            with_hostport(store_url, "127.0.0.1", proxy.port), redis_url, make_app(redis_url)
        )

        def wait() -> None:
            try:
                out.append(coord.wait(run_id, poll_s=0.1, timeout_s=60))
            except BaseException as exc:  # reported below
                out.append(exc)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        time.sleep(0.5)
        proxy.pause()
        proxy.reset_all()  # the wait's connection is cut, and a new one gets nowhere
        time.sleep(1.5)
        assert not out, out  # still waiting, not failed
        with psycopg.connect(store_url, autocommit=True) as conn:  # the shard ends meanwhile
            assert leases.finish_shard(conn, lease, "completed", requests_scheduled=0)
        proxy.resume()
        waiter.join(30)
    assert out == ["completed"]


def test_a_wait_rides_through_reconnects_that_fail(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new connection refused or timed out while the store is away (connect_store raises
    StoreError, not psycopg's OperationalError) is part of the outage too: the wait goes on
    (the fleet's Redis-restart test failed on a connection that timed out after 10 s)."""
    with psycopg.connect(store_url, autocommit=True) as conn:
        run_id = _make_run(conn, ["r-0"])
        lease = leases.claim_shard(conn, run_id, "r-0", "w", host="h", pid=1, ttl_s=60)
        assert lease is not None
        assert leases.finish_shard(conn, lease, "completed", requests_scheduled=0)
    redis_url = "redis://127.0.0.1:1/0"  # the wait never uses it
    coord = Coordinator(store_url, redis_url, make_app(redis_url))
    real = coord._conn
    failures = ["refused", "timed out"]

    def flaky() -> psycopg.Connection[Any]:
        if failures:
            raise StoreError(f"cannot connect to the store: connection {failures.pop(0)}")
        return real()

    monkeypatch.setattr(coord, "_conn", flaky)
    assert coord.wait(run_id, poll_s=0.05, timeout_s=30) == "completed"
    assert failures == []
