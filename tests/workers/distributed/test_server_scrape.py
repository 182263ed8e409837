"""One metrics scraper per distributed run: two regions, one worker each; the shard the
coordinator named scrapes the target's /metrics for the run, the other does not, so every
series has one sample per scrape (no duplicates from a second poller)."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.celery_workers import Cluster, SimServer
from tests.workers.distributed.helpers import coordinator, ledger, make_spec
from workers.coordinator import SubmitOptions
from workers.server_metrics import SCRAPER_KEY

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_control_shard_scrapes_once_for_the_run(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    cluster.start("eu")
    cluster.start("us")
    spec = make_spec(sim_server.base_url, [("eu", 0.5), ("us", 0.5)], rate=8, duration_s=4)
    metrics = sim_server.base_url.removesuffix("/v1") + "/metrics"
    spec = spec.model_copy(
        update={"target": spec.target.model_copy(update={"metrics_url": metrics})}
    )
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    assert [p.shard_id for p in launch.plans if p.extra.get(SCRAPER_KEY)] == ["eu-0"]
    assert coord.wait(launch.run_id, timeout_s=60) == "completed"
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        ledger(conn, launch.run_id, ["eu-0", "us-0"])
        row = conn.execute(
            "SELECT count(*), count(DISTINCT t) FROM server_metrics "
            "WHERE run_id = %s AND name = 'peakload_sim:num_requests_running'",
            (launch.run_id,),
        ).fetchone()
    assert row is not None
    total, distinct = row
    assert total >= 3  # scraped through the run, about once a second
    assert total == distinct  # one scraper: one sample per scrape instant
