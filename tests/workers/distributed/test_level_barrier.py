"""A distributed sweep's levels do not overlap across regions: under `drain`, every shard starts
its next level once every shard has drained its last (they meet in the Redis pool), so a region
whose answers are slow holds the fast one back, and no request of level 0, in any region, is in
flight once level 1 has started (real `celery worker` processes, one per region, each with its
own simulated engine; timestamps on the run's reference clock)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from loadgen.runspec.spec import spec_from_dict
from tests.support.celery_workers import Cluster, SimServer
from tests.workers.distributed.helpers import coordinator, ledger, run_status, shards
from workers.coordinator import SubmitOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CLOCK_SLACK_NS = 20_000_000  # two shards' clock offsets, each measured to a few ms on loopback


@pytest.fixture
def sims() -> Iterator[dict[str, SimServer]]:
    out = {  # 8-token answers: 55 ms from region a's engine, 1.07 s from region b's
        "a": SimServer("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5"),
        "b": SimServer("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "150"),
    }
    yield out
    for s in out.values():
        s.stop()


def test_a_slow_region_holds_the_next_level_back(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sims: dict[str, SimServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    for region, sim in sims.items():
        cluster.start(region, extra_env={"PEAKLOAD_TARGET_OVERRIDE": sim.base_url})
    spec = spec_from_dict(
        {
            "name": "level-barrier",
            "target": {
                "api": "openai-chat",
                "base_url": sims["a"].base_url,
                "model": "sim",
                "deadline_s": 10,
            },
            "workload": {"prompt_tokens": 16, "output_tokens": 8, "seed": 3},
            "load": {"rate": [4, 6], "arrival": "constant", "duration_s": 2.0, "seed": 5},
            "regions": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
        }
    )
    coord = coordinator(cluster_env)
    launch = coord.submit(spec, SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    status = coord.wait(launch.run_id, timeout_s=120)
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        assert status == "completed", run_status(conn, launch.run_id)
        ledger(conn, launch.run_id, ["a-0", "b-0"])
        lv = {s: r["extra"]["levels"] for s, r in shards(conn, launch.run_id).items()}
        a0, a1, b0, b1 = lv["a-0"][0], lv["a-0"][1], lv["b-0"][0], lv["b-0"][1]
        assert a0["between_levels"] == b0["between_levels"] == "drain"
        # the test means something: region b's last answers kept it busy well after region a
        assert b0["drained_at_ns"] - a0["drained_at_ns"] > 300_000_000, (a0, b0)
        # region a waited for region b: both began level 1 after b had drained level 0
        assert a1["started_at_ns"] >= b0["drained_at_ns"] - CLOCK_SLACK_NS, (a1, b0)
        assert abs(a1["started_at_ns"] - b1["started_at_ns"]) < 100_000_000, (a1, b1)
        # from the stored rows: no level-0 request of either region ended after level 1 began
        late = conn.execute(
            """SELECT count(*) FROM requests r JOIN run_levels l
                   ON l.run_id = r.run_id AND l.level = 1
                WHERE r.run_id = %s AND r.level = 0 AND r.end_ns IS NOT NULL
                  AND r.scheduled_at + make_interval(secs => r.end_ns / 1e9)
                      > l.started_at + make_interval(secs => %s / 1e9)""",
            (launch.run_id, CLOCK_SLACK_NS),
        ).fetchone()
        assert late is not None and late[0] == 0, late
