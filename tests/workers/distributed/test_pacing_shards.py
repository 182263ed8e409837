"""Pacing across shards: two regions share a simulated provider's 20 requests/s (sim preset
`hosted`); each shard paces to its share of the spec's limit (1,200/min x 0.9 x 1/2), so the
run offered 30 requests/s collects no 429 beyond the first."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.support.celery_workers import Cluster, SimServer
from tests.workers.distributed.helpers import coordinator, ledger, make_spec
from workers.coordinator import SubmitOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def hosted_sim() -> Iterator[SimServer]:
    sim = SimServer("--preset", "hosted")
    yield sim
    sim.stop()


def test_each_shard_paces_to_its_share(
    cluster: Cluster,
    cluster_env: dict[str, str],
    hosted_sim: SimServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    cluster.start("eu")
    cluster.start("us")
    spec = make_spec(hosted_sim.base_url, [("eu", 0.5), ("us", 0.5)], rate=30, duration_s=3)
    spec = spec.model_copy(
        update={
            "pacing": spec.pacing.model_copy(update={"enabled": True, "requests_per_minute": 1200})
        }
    )
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    assert coord.wait(launch.run_id, timeout_s=90) == "completed"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        n = ledger(conn, launch.run_id, ["eu-0", "us-0"])
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE http_status = 429), max(sent_ns) / 1e9 "
            "FROM requests WHERE run_id = %s",
            (launch.run_id,),
        ).fetchone()
    assert n == 90
    assert row is not None and row[0] <= 1
    assert row[1] > 1.5  # 45 requests a shard at 9/s: the last sent ~2 s after its schedule
