"""A two-region saturation search is one search: real `celery worker` processes, one per region,
each reaching its own simulated engine. Region "a"'s engine is always fast; region "b"'s serves
one sequence at a time (about 12 requests a second), so past that its queue, and TTFT, grow.
The verdict at each level, worked out by hand from the stored rows of both regions together
(loadgen.results.binomial.decide), is the one the search reached and stored, both shards ran the
same levels, and at some level the pooled verdict is not the one region "a"'s rows alone give. And
when region "b"'s worker dies mid-search, region "a" stops waiting for it after the bound, its
search is judged on the closed (incomplete) pool, and the run's answer and table say so."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from analysis.reports.summary import summarize_run
from analysis.reports.summary_table import render_summary_table, search_line
from loadgen.results.binomial import Verdict, decide
from loadgen.results.reasons import STOPPED_BY_PEAKLOAD
from loadgen.runspec.spec import spec_from_dict
from tests.support.celery_workers import Cluster, SimServer
from tests.workers.distributed.helpers import (
    coordinator,
    killed_shard_rows,
    ledger,
    run_status,
    shards,
    wait_for,
)
from workers.coordinator import SubmitOptions

pytestmark = [pytest.mark.integration, pytest.mark.slow]

THRESHOLD_MS, PERCENTILE, CONFIDENCE = 100.0, 75.0, 0.9


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[dict[str, SimServer]]:
    one_at_a_time = tmp_path / "b.json"
    one_at_a_time.write_text(
        json.dumps(
            {"mode": "batching", "slots": 1, "decode_step_ms": 10, "decode_step_ms_per_seq": 0}
        )
    )
    out = {
        "a": SimServer("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5"),
        "b": SimServer("--config", str(one_at_a_time)),
    }
    yield out
    for s in out.values():
        s.stop()


def _spec(base_url: str, deadline_s: float = 20) -> Any:
    return spec_from_dict(
        {
            "name": "pooled-search",
            # the error budget off: what is checked by hand here is the pooled SLO decision
            "max_error_rate": 1.0,
            "target": {
                "api": "openai-chat",
                "base_url": base_url,
                "model": "sim",
                "deadline_s": deadline_s,
            },
            "workload": {"prompt_tokens": 16, "output_tokens": 8, "seed": 3},
            "load": {
                "saturation": {
                    "start": 8,
                    "max": 64,
                    "max_steps": 4,
                    "confidence": CONFIDENCE,
                    "max_extensions": 1,
                },
                "arrival": "constant",
                "duration_s": 2.5,
                "warmup_s": 0.5,
                "cooldown_s": 0.25,
                "seed": 5,
            },
            "slos": [{"metric": "ttft_ms", "percentile": PERCENTILE, "threshold": THRESHOLD_MS}],
            "regions": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.5}],
        }
    )


def _misses(
    conn: psycopg.Connection[Any], run_id: str, level: int, region: str | None
) -> tuple[int, int]:
    """(n, k) of a level's steady requests, as the search counts them: an ok request's TTFT
    (first token - sent) is a sample, an exceedance if >= the threshold; any other outcome is a
    miss, except a request peakload itself never sent because the run stopped."""
    rows = conn.execute(
        """SELECT outcome, error_phase, (first_token_ns - sent_ns) / 1e6 FROM requests
            WHERE run_id = %s AND level = %s AND phase = 'steady'
              AND (%s::text IS NULL OR region = %s)""",
        (run_id, level, region, region),
    ).fetchall()
    n = k = 0
    for outcome, why, ttft in rows:
        if outcome == "ok":
            if ttft is None:
                continue
            n += 1
            k += float(ttft) >= THRESHOLD_MS
        elif not (outcome == "not_sent" and why in STOPPED_BY_PEAKLOAD):
            n, k = n + 1, k + 1
    return n, k


def _by_hand(
    conn: psycopg.Connection[Any],
    run_id: str,
    levels: list[dict[str, Any]],
    region_of: Callable[[int], str | None],
    *,
    stored_too: bool = True,
) -> tuple[dict[float, Verdict], dict[float, tuple[int, int]]]:
    """Each tried load's verdict (loadgen.results.binomial.decide) on the (n, k) of its level runs'
    rows, pooled, from `region_of(level)` (None: every region); with `stored_too`, each level's
    stored decision must be the one its runs so far give."""
    decided: dict[float, Verdict] = {}
    nk: dict[float, tuple[int, int]] = {}
    for lv in levels:
        value = float(lv["value"])
        n, k = _misses(conn, run_id, int(lv["level"]), region_of(int(lv["level"])))
        pn, pk = nk.get(value, (0, 0))
        nk[value] = (pn + n, pk + k)
        decided[value] = decide(*nk[value], PERCENTILE, CONFIDENCE)
        if stored_too:
            assert lv["search"]["verdict"] == decided[value], (lv, nk)
    return decided, nk


def _answer_is(stored: dict[str, Any], decided: dict[float, Verdict]) -> None:
    """The stored answer is the one the hand-computed verdicts give."""
    passing = [v for v, d in decided.items() if d == "pass"]
    best = max(passing) if passing else None
    above = sorted(v for v, d in decided.items() if d != "pass" and (best is None or v > best))
    assert stored["highest_passing"] == best, (stored, decided)
    assert stored["next_failing"] == (above[0] if above else None), (stored, decided)
    assert [(t["value"], t["verdict"]) for t in stored["tried"]] == list(decided.items())


def test_two_region_search_decides_on_pooled_samples(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sims: dict[str, SimServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    for region, sim in sims.items():
        cluster.start(region, extra_env={"PEAKLOAD_TARGET_OVERRIDE": sim.base_url})
    coord = coordinator(cluster_env)
    launch = coord.submit(_spec(sims["a"].base_url), SubmitOptions(ready_timeout_s=30))
    assert launch.started, launch.reason
    status = coord.wait(launch.run_id, timeout_s=180)
    with psycopg.connect(cluster_env["PEAKLOAD_DATABASE_URL"], autocommit=True) as conn:
        assert status == "completed", run_status(conn, launch.run_id)
        ledger(conn, launch.run_id, ["a-0", "b-0"])
        per_shard = {s: r["extra"]["levels"] for s, r in shards(conn, launch.run_id).items()}
        ran = {s: [(lv["level"], lv["value"]) for lv in levels] for s, levels in per_shard.items()}
        assert ran["a-0"] == ran["b-0"] and len(ran["a-0"]) >= 3, ran
        row = conn.execute("SELECT search FROM runs WHERE run_id = %s", (launch.run_id,)).fetchone()
        assert row is not None
        stored = row[0]
        # by hand: each tried load's verdict on both regions' rows (its runs pooled)
        decided, pooled_nk = _by_hand(conn, launch.run_id, per_shard["a-0"], lambda _: None)
        alone, alone_nk = _by_hand(
            conn, launch.run_id, per_shard["a-0"], lambda _: "a", stored_too=False
        )
        for lv in per_shard["a-0"]:
            assert lv["search"]["pool"] == {"shards": ["a-0", "b-0"], "missing": []}
        assert stored["pooled"] is True and stored["pool_complete"] is True
        assert stored["missing_shards"] == []
        _answer_is(stored, decided)
        # region b's queue decided some level: region a's rows alone would have said otherwise
        assert alone != decided, (pooled_nk, alone_nk)


def test_a_dead_shard_closes_the_pool_and_the_answer_says_so(
    cluster: Cluster,
    cluster_env: dict[str, str],
    sims: dict[str, SimServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    workers = {
        region: cluster.start(region, extra_env={"PEAKLOAD_TARGET_OVERRIDE": sim.base_url})
        for region, sim in sims.items()
    }
    coord = coordinator(cluster_env)
    # a short request deadline: the pool's bound is duration + deadline + a margin
    launch = coord.submit(
        _spec(sims["a"].base_url, deadline_s=3), SubmitOptions(ready_timeout_s=30)
    )
    assert launch.started, launch.reason
    url = cluster_env["PEAKLOAD_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM requests WHERE run_id = %s AND shard_id = 'b-0' "
                    "AND level = 1",
                    (launch.run_id,),
                ).fetchone()[0]
                >= 2
            ),
            30,
            "rows of b-0's second level",
        )
        workers["b"].kill()  # SIGKILL: b-0 never hands in its second level's samples
        status = coord.wait(launch.run_id, timeout_s=180)
        assert status == "partial", run_status(conn, launch.run_id)
        rows = shards(conn, launch.run_id)
        assert rows["a-0"]["state"] == "completed" and rows["b-0"]["state"] == "interrupted"
        ledger(conn, launch.run_id, ["a-0"], killed=("b-0",))
        assert killed_shard_rows(conn, launch.run_id, "b-0") >= 2
        levels = rows["a-0"]["extra"]["levels"]
        assert len(levels) >= 3
        assert levels[0]["search"]["pool"] == {"shards": ["a-0", "b-0"], "missing": []}
        for lv in levels[1:]:  # from the second level on: a-0's samples alone, as closed
            assert lv["search"]["pool"] == {"shards": ["a-0"], "missing": ["b-0"]}, lv
        # by hand: the first level on both regions' rows, the later ones on region a's only
        decided, _ = _by_hand(
            conn, launch.run_id, levels, lambda level: None if level == 0 else "a"
        )
        stored = conn.execute(
            "SELECT search FROM runs WHERE run_id = %s", (launch.run_id,)
        ).fetchone()[0]
        assert stored["pooled"] is True and stored["pool_complete"] is False
        assert stored["missing_shards"] == ["b-0"]
        assert stored["stopped_early"] == ["b-0"]  # killed: it handed in no answer at all
        _answer_is(stored, decided)
        summary = summarize_run(conn, launch.run_id)
    line = search_line(summary)
    assert line is not None and "incomplete pool" in line and "b-0" in line
    assert line in str(render_summary_table(summary).caption)
