"""Regions on one machine: three workers, each reaching the sim through a TCP proxy adding its
region's round trip (2, 40, 120 ms), results broken down per region (TTFT = network + server);
a canary API key never reaches broker traffic, task events, worker logs or the database (S1);
and `peakload abort` stops a run within seconds keeping what was measured. (The database
unreachable under a worker, D3, is in test_faults: no timing of it needs the cores alone.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
import redis
from psycopg import sql

from analysis.stats.regions import network_breakdown
from tests.support.celery_workers import REPO, Cluster, RedisServer, SimServer
from tests.support.stores import host_port
from tests.support.tcpproxy import TcpProxy
from tests.workers.distributed.helpers import (
    CANARY_ENV,
    coordinator,
    ledger,
    make_spec,
    run_status,
    shards,
    wait_for,
)
from workers.coordinator import SubmitOptions

# serial: per-region round trips and an abort within seconds are timings: the cores alone
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]

CANARY = "sk-canary-7f3a9c1e5b2d4f60"
RTT_MS = {"near": 2.0, "mid": 40.0, "far": 120.0}


class Monitor:
    """Everything Redis sees (`MONITOR`): task messages, acks, event publishes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(b"MONITOR\r\n")
        self.sock.settimeout(0.2)
        self.data = bytearray()
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop_ev.is_set():
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            self.data += chunk

    def stop(self) -> bytes:
        self.stop_ev.set()
        self.thread.join(2)
        self.sock.close()
        return bytes(self.data)


@pytest.fixture
def proxies(sim_server: SimServer) -> Iterator[dict[str, TcpProxy]]:
    host, port = host_port(sim_server.base_url)
    out = {r: TcpProxy(host, port, latency_ms=ms / 2).start() for r, ms in RTT_MS.items()}
    yield out
    for p in out.values():
        p.stop()


def _db_text(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    ]
    out = []
    for t in tables:
        q = sql.SQL("SELECT coalesce(string_agg(x::text, ' '), '') FROM {} x").format(
            sql.Identifier(str(t))
        )
        row = conn.execute(q).fetchone()
        out.append(str(row[0]) if row else "")
    return "\n".join(out)


def _redis_text(url: str) -> str:
    out = []
    with redis.Redis.from_url(url) as r:
        for key in r.scan_iter(count=1000):
            kind = r.type(key)
            out.append(repr(key))
            if kind == b"string":
                out.append(repr(r.get(key)))
            elif kind == b"list":
                out.append(repr(r.lrange(key, 0, -1)))
            elif kind == b"hash":
                out.append(repr(r.hgetall(key)))
            elif kind == b"set":
                out.append(repr(r.smembers(key)))
            elif kind == b"zset":
                out.append(repr(r.zrange(key, 0, -1)))
    return "\n".join(out)


def test_three_regions_latency_breakdown_and_canary_key(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    proxies: dict[str, TcpProxy],
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    monkeypatch.setenv(CANARY_ENV, CANARY)
    for region, proxy in proxies.items():
        cluster.start(
            region,
            extra_env={
                CANARY_ENV: CANARY,
                "PEAKLOAD_TARGET_OVERRIDE": f"http://127.0.0.1:{proxy.port}/v1",
            },
        )
    mon = Monitor(redis_server.port)
    spec = make_spec(
        sim_server.base_url,
        [(r, 1 / 3) for r in RTT_MS],
        rate=12,
        duration_s=3,
        api_key_env=CANARY_ENV,
    )
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    assert coord.wait(launch.run_id, timeout_s=60) == "completed"
    broker = mon.stop()
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        ledger(conn, launch.run_id, [f"{r}-0" for r in RTT_MS])
        net = {r["region"]: r for r in network_breakdown(conn, launch.run_id)}
        for region, rtt in RTT_MS.items():
            got = net[region]
            # the probe's round trip includes the proxy's added delay, and little else
            assert rtt <= got["network_rtt_ms"] < rtt + 25, (region, got)
            # TTFT = network + server: the sim's fixed 20 ms shows as the server's share
            assert got["ttft_p50_ms"] >= rtt + 15, (region, got)
            assert 10 <= got["server_time_ms"] <= 60, (region, got)
        db = _db_text(conn)
    assert broker.count(b"peakload.run_shard") >= 3  # the monitor did see the task messages
    assert CANARY.encode() not in broker, "canary key in broker traffic or task events"
    assert CANARY not in _redis_text(redis_server.url(0))
    assert CANARY not in cluster.logs()
    assert CANARY not in db


def test_abort_stops_every_region_within_seconds(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    cluster.start("eu")
    cluster.start("us")
    spec = make_spec(sim_server.base_url, [("eu", 0.5), ("us", 0.5)], rate=10, duration_s=30)
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    url = cluster_env["PEAKLOAD_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM requests WHERE run_id = %s", (launch.run_id,)
                ).fetchone()[0]
                >= 4
            ),
            15,
            "first rows",
        )
        t0 = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "from ui.cli import main; main()",
                "abort",
                launch.run_id,
                "--reason",
                "test abort",
            ],
            env={**os.environ, **cluster_env},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "abort requested" in out.stdout
        assert coord.wait(launch.run_id, timeout_s=30, poll_s=0.2) == "aborted"
        assert time.monotonic() - t0 < 10
        rows = shards(conn, launch.run_id)
        assert {r["state"] for r in rows.values()} == {"aborted"}
        status, reason = run_status(conn, launch.run_id)
        assert status == "aborted" and reason is not None and "test abort" in reason
        n = ledger(conn, launch.run_id, ["eu-0", "us-0"])
        assert 4 <= n < 10 * 30
