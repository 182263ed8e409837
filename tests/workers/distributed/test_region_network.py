"""Per-region network and server time from a two-region run through latency proxies (the
set-up of deploy/local/workers.sh: one proxy per region adding its round trip): each region's
stored network time is the added round trip, server time is the sim's, the report and
`compare` show them, and both regions' timelines sit on the reference clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from analysis.reports import render
from analysis.reports.report import build_report
from tests.support.celery_workers import Cluster, SimServer
from tests.support.stores import host_port
from tests.support.tcpproxy import TcpProxy
from tests.workers.distributed.helpers import coordinator, ledger, make_spec
from workers.coordinator import SubmitOptions
from workers.probes import PROBES

# serial: measured round trips against the proxies' added delay need the cores alone
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]

RTT_MS = {"near": 2.0, "far": 60.0}


@pytest.fixture
def proxies(sim_server: SimServer) -> Iterator[dict[str, TcpProxy]]:
    host, port = host_port(sim_server.base_url)
    out = {r: TcpProxy(host, port, latency_ms=ms / 2).start() for r, ms in RTT_MS.items()}
    yield out
    for p in out.values():
        p.stop()


def test_region_network_and_server_time(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    proxies: dict[str, TcpProxy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    for region, proxy in proxies.items():
        cluster.start(
            region, extra_env={"PEAKLOAD_TARGET_OVERRIDE": f"http://127.0.0.1:{proxy.port}/v1"}
        )
    spec = make_spec(sim_server.base_url, [(r, 0.5) for r in RTT_MS], rate=10, duration_s=3)
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    assert coord.wait(launch.run_id, timeout_s=60) == "completed"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        ledger(conn, launch.run_id, [f"{r}-0" for r in RTT_MS])
        rep: dict[str, Any] = build_report(conn, launch.run_id, resamples=50)
        starts = conn.execute(
            "SELECT region, min(scheduled_at) FROM requests WHERE run_id = %s GROUP BY region",
            (launch.run_id,),
        ).fetchall()
    by = {r["region"]: r for r in rep["regions_network"]}
    for region, rtt in RTT_MS.items():
        got = by[region]
        # the probe's round trip: the proxy's added delay plus loopback and the sim's answer
        assert rtt <= got["network_rtt_ms"] < rtt + 5.0, (region, got)
        # the sim's fixed TTFT (20 ms) is the server's share, whatever the distance
        assert 10 <= got["server_time_ms"]["p50"] <= 40, (region, got)
        assert got["ttft_ms"]["p50"] >= rtt + 10
        assert got["clock_uncertainty_ms"] is not None and not got["clock_suspect_shards"]
    # what the regions differ by is the round trip the proxies really added (their timers
    # fire late on a busy host: each probe's added delay is kept), to within 2 ms
    added = {r: really_added_ms(proxies[r]) for r in RTT_MS}
    for region, rtt in RTT_MS.items():
        assert rtt <= added[region] < rtt + 10, (region, proxies[region].exchanges)
    measured = by["far"]["network_rtt_ms"] - by["near"]["network_rtt_ms"]
    assert abs(measured - (added["far"] - added["near"])) < 2.0, (added, by)
    # both regions start together on the reference clock (each within its uncertainty): each
    # region's first request at its place in the run's one lattice of 10/s, the k-th of the
    # two regions (fraction [k/2, k/2 + 1/2)) at k/10 s
    first = dict(starts)
    phase_s = {r: k / 10 for k, r in enumerate(RTT_MS)}
    t = sorted(first[r].timestamp() - phase_s[r] for r in RTT_MS)
    assert t[-1] - t[0] < 0.05
    assert "Network and server time per region" in render.render_html(rep)


def really_added_ms(proxy: TcpProxy) -> float:
    """The least delay the proxy added to the warm GETs of the shard's network probe (the
    connection that carried its PROBES GET /models; the first one also set the connection up):
    the probe's round trip is its fastest warm GET, so the fastest is what it carries."""
    gets: dict[int, list[float]] = {}
    for conn, line, held_s in proxy.exchanges:
        if line.startswith("GET ") and "/models" in line:
            gets.setdefault(conn, []).append(held_s)
    probes = [held for held in gets.values() if len(held) == PROBES]
    assert len(probes) == 1, proxy.exchanges
    return min(probes[0][1:]) * 1000
