"""Live metrics from the Celery shard path: two region workers (real `celery worker` processes)
each serve their shards' metrics (PEAKLOAD_METRICS_PORT); a real Prometheus scrapes both during a
distributed run, and its per-region counts by outcome equal the store's."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.support.celery_workers import Cluster, SimServer
from tests.support.ports import free_port
from tests.support.prometheus import prometheus_binary, start_prometheus
from tests.workers.distributed.helpers import coordinator, make_spec, shards
from workers.coordinator import SubmitOptions

pytestmark = [pytest.mark.integration]


def test_region_workers_serve_their_shards_metrics_to_prometheus(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prometheus_binary()  # skips before starting workers when there is none
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    ports = {"eu": free_port(), "us": free_port()}
    for region, port in ports.items():
        cluster.start(region, concurrency=1, extra_env={"PEAKLOAD_METRICS_PORT": str(port)})
    targets = [f"127.0.0.1:{p}" for p in ports.values()]
    with start_prometheus(targets, interval_s=0.2) as prom:
        spec = make_spec(sim_server.base_url, [("eu", 0.5), ("us", 0.5)], rate=10, duration_s=3)
        coord = coordinator(cluster_env)
        launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
        assert launch.started, launch.reason
        assert coord.wait(launch.run_id, timeout_s=60) == "completed"
        with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
            stored: dict[tuple[str, str], float] = {
                (str(region), str(outcome)): float(n)
                for region, outcome, n in conn.execute(
                    "SELECT region, outcome, count(*) FROM requests WHERE run_id = %s"
                    " GROUP BY region, outcome",
                    (launch.run_id,),
                ).fetchall()
            }
            urls = {
                sid: r["extra"].get("metrics_url") for sid, r in shards(conn, launch.run_id).items()
            }
        assert {k[0] for k in stored} == {"eu", "us"} and all(v > 0 for v in stored.values())
        assert urls == {
            "eu-0": f"http://127.0.0.1:{ports['eu']}/metrics",
            "us-0": f"http://127.0.0.1:{ports['us']}/metrics",
        }
        expr = f'sum by (region, outcome) (peakload_requests_total{{run_id="{launch.run_id}"}})'
        seen: dict[tuple[str, str], float] = {}
        deadline = time.monotonic() + 10  # the workers keep serving: the next scrape has it all
        while time.monotonic() < deadline:
            seen = {
                (r["metric"]["region"], r["metric"]["outcome"]): float(r["value"][1])
                for r in prom.query(expr)
            }
            if seen == stored:
                break
            time.sleep(0.2)
        assert seen == stored
        ttft: Any = prom.query(
            "sum by (region) (gen_ai_client_operation_time_to_first_chunk_seconds_count"
            f'{{run_id="{launch.run_id}"}})'
        )
        assert {r["metric"]["region"]: float(r["value"][1]) for r in ttft} == {
            region: n for (region, outcome), n in stored.items() if outcome == "ok"
        }
