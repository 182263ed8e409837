"""A pooled saturation search over two regions, real `celery worker` processes, where Celery's own
soft time limit stops region "b"'s shard mid-search (its task sent with a short limit and no
runner deadline of its own, so SoftTimeLimitExceeded, not the runner, ends it): b-0 ends
`timed_out` keeping the search it had reached (a prefix of a-0's), and the run's stored answer is
region "a"'s complete one naming b-0 as stopped early. Before issue 28 b-0 stored no search and
the run kept a-0's answer without naming it. (A shard killed outright, as the hard limit does,
hands in nothing: test_search_pool's dead shard shows it named too.)"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import psycopg
import pytest

from analysis.reports.summary import summarize_run
from analysis.reports.summary_table import search_line
from loadgen.runspec.spec import spec_from_dict
from tests.support.celery_workers import Cluster, SimServer
from tests.workers.distributed.helpers import coordinator, run_status, shards
from workers.app import TASK_RUN_SHARD, region_queue, shard_time_limits
from workers.coordinator import SubmitOptions
from workers.sample_pool import WAIT_MARGIN_S
from workers.shard_exec import planned_duration_s

# serial: a soft time limit must land while the search runs; the loaded parallel phase moved it
# past the search's end (the run then completed: ci3 here)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.serial]

# b-0's task starts, checks in, waits ~2 s for the start, runs its first level (3.25 s and a
# drain): a 9 s limit lands in its first or second level, long before a-0's search ends
B_LIMIT_S = 9.0


def _spec(base_url: str) -> Any:
    return spec_from_dict(
        {
            "name": "time-limited-search",
            "target": {
                "api": "openai-chat",
                "base_url": base_url,
                "model": "sim",
                "deadline_s": 3,
            },
            "workload": {"prompt_tokens": 16, "output_tokens": 8, "seed": 3},
            "load": {
                "saturation": {"start": 8, "max": 32, "max_steps": 3, "confidence": 0.9},
                "arrival": "constant",
                "duration_s": 2.5,
                "warmup_s": 0.5,
                "cooldown_s": 0.25,
                "seed": 5,
            },
            "slos": [{"metric": "ttft_ms", "percentile": 75, "threshold": 500}],
            "regions": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
        }
    )


def test_a_shard_stopped_by_celery_s_soft_limit_is_named_in_the_answer(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sim_server: SimServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    for region in ("a", "b"):
        cluster.start(region)
    coord = coordinator(cluster_env)
    opts = SubmitOptions(ready_timeout_s=30)
    run_id, plans, tpw = coord.create(_spec(sim_server.base_url), opts)
    for p in plans:  # as Coordinator.dispatch, but b-0's limit is Celery's alone, and short
        soft, hard = shard_time_limits(planned_duration_s(p))
        kwargs: dict[str, Any] = {"soft_limit_s": soft, "tokens_per_word": tpw}
        if p.region == "b":
            kwargs["soft_limit_s"] = None  # no runner deadline: the limit lands in the loop
            soft, hard = B_LIMIT_S, B_LIMIT_S + 60
        coord.app.send_task(
            TASK_RUN_SHARD,
            args=[p.to_json()],
            kwargs=kwargs,
            queue=region_queue(p.region),
            soft_time_limit=soft,
            time_limit=hard,
            expires=90,
        )
    launch = coord.coordinate_start(run_id, opts)
    assert launch.started, launch.reason
    status = coord.wait(run_id, timeout_s=180)
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        assert status == "partial", run_status(conn, run_id)
        rows = shards(conn, run_id)
        assert rows["a-0"]["state"] == "completed"
        b = rows["b-0"]
        full = rows["a-0"]["extra"]["search"]["tried"]
        assert len(full) >= 2
        assert b["state"] == "timed_out" and "SoftTimeLimitExceeded" in b["state_reason"]
        cut = b["extra"]["search"]["tried"]  # what b-0 had decided when the limit landed
        assert len(cut) < len(full) and cut == full[: len(cut)]
        row = conn.execute("SELECT search FROM runs WHERE run_id = %s", (run_id,)).fetchone()
        assert row is not None
        stored = row[0]
        assert stored["tried"] == full and stored["pooled"] is True
        assert stored["stopped_early"] == ["b-0"]
        assert stored["pool_complete"] is False and stored["missing_shards"] == ["b-0"]
        # b-0 left the pool as it stopped: a-0 did not wait the pool's bound for it (before,
        # one gap between levels was the whole bound, about 21 s)
        spans = conn.execute(
            "SELECT started_at, ended_at FROM run_levels WHERE run_id = %s ORDER BY started_at",
            (run_id,),
        ).fetchall()
        gaps = [(b[0] - a[1]).total_seconds() for a, b in pairwise(spans)]
        assert gaps and max(gaps) < WAIT_MARGIN_S, gaps
        line = search_line(summarize_run(conn, run_id))
    assert line is not None and "b-0 stopped before the search ended" in line
