"""`peakload run` judges the load it delivered and stores a saturation search's answer: a
concurrency-capped open-loop level is flagged with the reason, and an SLA claim on it counts the
unsent requests as misses; a search's highest passing load is stored with the run and shown."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from tests.cli.test_run_command import peakload
from tests.support.sim import SimProcess

pytestmark = [pytest.mark.integration, pytest.mark.one_store]  # tests/support/stores.py


def _spec(base_url: str, load: str, extra: str = "") -> str:
    return f"""
name = "validity"
[target]
api = "openai-chat"
base_url = "{base_url}"
model = "m"
[workload]
prompt_tokens = 16
output_tokens = 8
[load]
{load}
{extra}
"""


def test_a_capped_open_loop_level_is_flagged_and_its_claim_counts_the_unsent(
    sim: SimProcess, store_url: str, tmp_path: Path
) -> None:
    # 40 req/s of ~130 ms answers keeps ~5 in flight; the cap of 2 refuses most of them
    spec = tmp_path / "capped.toml"
    spec.write_text(
        _spec(
            sim.base_url,
            'rate = [40.0]\narrival = "constant"\nduration_s = 2.0\nwarmup_s = 0.5\n'
            "max_concurrency = 2",
        )
    )
    out = tmp_path / "summary.json"
    proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    assert proc.returncode != 0 or "FLAGGED" in proc.stdout, proc.stderr
    summary = json.loads(out.read_text())
    (lv,) = summary["levels"]
    unsent = lv["failures_by_kind"]["not_sent:concurrency_cap"]
    assert unsent > 10
    flags = " ".join(lv["flags"])
    assert f"{unsent} requests not sent (concurrency_cap: {unsent})" in flags
    assert "achieved load short" in flags
    assert "FLAGGED" in proc.stdout
    claims = tmp_path / "claims.toml"
    claims.write_text(
        '[[claims]]\nmetric = "ttft_ms"\npercentile = 50\nthreshold = 5000\nlevel = 0\n'
    )
    sla = peakload(
        ["sla", summary["run_id"], "--claims", str(claims), "--json"], store_url, tmp_path
    )
    verdict = json.loads(sla.stdout)
    v = verdict["verdicts"][0] if "verdicts" in verdict else verdict[0]
    with psycopg.connect(store_url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE outcome = 'ok'), "
            "count(*) FILTER (WHERE outcome = 'not_sent') FROM requests "
            "WHERE run_id = %s AND phase = 'steady'",
            (summary["run_id"],),
        ).fetchone()
    assert row is not None
    ok_steady, unsent_steady = row
    # every ok answer is far below 5 s: the exceedances are exactly the unsent requests
    assert v["n"] == ok_steady + unsent_steady and v["exceedances"] == unsent_steady > 0
    assert v["stopped"] == 0


def test_a_saturation_search_answer_is_stored_and_shown(
    sim: SimProcess, store_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "search.toml"
    spec.write_text(  # the error budget off: 24 requests cannot prove 1 % (not the subject)
        "max_error_rate = 1.0\n"
        + _spec(
            sim.base_url,
            'arrival = "constant"\nduration_s = 1.5\nwarmup_s = 0.3\n'
            "[load.saturation]\nstart = 20\nmax = 40\nmax_steps = 2\nconfidence = 0.9",
            '[[slos]]\nmetric = "ttft_ms"\npercentile = 90\nthreshold = 1000',
        )
    )
    out = tmp_path / "summary.json"
    proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    summary = json.loads(out.read_text())
    # 20 then 40 req/s, 24 and 48 steady samples all far below 1 s: both pass at 90%
    assert summary["search"]["highest_passing"] == 40.0, proc.stdout
    assert summary["search"]["next_failing"] is None
    assert summary["search"]["confidence"] == 0.9
    assert "saturation search: highest load meeting the SLOs 40 req/s" in proc.stdout
    with psycopg.connect(store_url) as conn:
        stored = conn.execute(
            "SELECT search FROM runs WHERE run_id = %s", (summary["run_id"],)
        ).fetchone()
        levels = conn.execute(
            "SELECT value, search->>'verdict', steady_end > steady_start FROM run_levels "
            "WHERE run_id = %s ORDER BY level",
            (summary["run_id"],),
        ).fetchall()
    assert stored is not None and stored[0]["highest_passing"] == 40.0
    assert levels == [(20.0, "pass", True), (40.0, "pass", True)]


@pytest.mark.serial  # the closed loop's achieved concurrency: a loaded host holds fewer in flight
def test_a_two_region_local_sweep_keeps_its_levels_apart(
    sim: SimProcess, store_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "regions.toml"
    spec.write_text(
        _spec(
            sim.base_url,
            "concurrency = [2, 6]\nduration_s = 1.5\nwarmup_s = 0.3",
            '[[regions]]\nname = "eu"\nshare = 0.5\n[[regions]]\nname = "us"\nshare = 0.5',
        ).replace("output_tokens = 8", "output_tokens = 120")  # ~1.25 s answers
    )
    out = tmp_path / "summary.json"
    proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    summary = json.loads(out.read_text())
    l0, l1 = summary["levels"]
    assert set(l1["regions"]) == {"eu", "us"}, proc.stderr
    # both regions drained level 0 before either began level 1
    assert l1["other_levels_in_flight_max"] == 0 and l0["other_levels_in_flight_max"] == 0
    assert l1["achieved"] > 5.5 and l1["flags"] == []
    with psycopg.connect(store_url) as conn:
        rows = conn.execute(
            "SELECT level, between_levels, drained_at IS NOT NULL, "
            "extract(epoch FROM steady_end - steady_start) FROM run_levels "
            "WHERE run_id = %s ORDER BY level",
            (summary["run_id"],),
        ).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [(0, "drain", True), (1, "drain", True)]
    assert all(0.9 < float(r[3]) <= 1.2 for r in rows)  # 1.2 s planned, shards within 0.3 s


@pytest.mark.serial  # a rate and a server's request budget: a loaded host shifts both
@pytest.mark.parametrize("store_kind", ["plain"])  # the search's rule, on one store
def test_the_search_and_the_exit_verdict_name_the_same_load(store_url: str, tmp_path: Path) -> None:
    """Issue #21, point 6: a server holding 30 req/s answers every request fast but refuses
    (429) beyond its budget. The SLO (p50 TTFT < 5 s) passes at 20 and 40 req/s; the error
    budget (5 %) fails at 40. The search stores 20 as its highest passing load, and the exit
    verdict judges the same level."""
    from tests.support.sim import start_sim

    with start_sim(["--rate-limit-rps", "30"], tmp_path) as sim:
        spec = tmp_path / "search.toml"
        spec.write_text(
            "max_error_rate = 0.05\n"
            + _spec(
                sim.base_url,
                'arrival = "constant"\nduration_s = 3.3\nwarmup_s = 0.3\n'
                "[load.saturation]\nstart = 20\nmax = 40\nmax_steps = 2\nconfidence = 0.9",
                '[[slos]]\nmetric = "ttft_ms"\npercentile = 50\nthreshold = 5000\n'
                "[validity]\nmax_loop_lag_p99_ms = 1000\nmax_dispatch_delay_p99_ms = 1000",
            )
        )
        out = tmp_path / "summary.json"
        proc = peakload(["run", str(spec), "--json", str(out)], store_url, tmp_path)
    summary = json.loads(out.read_text())
    assert summary["search"]["highest_passing"] == 20.0, proc.stdout
    assert summary["search"]["next_failing"] == 40.0
    assert summary["verdict"]["level"] == 0 and "load 20" in summary["verdict"]["reason"]
    assert proc.returncode == 0, proc.stdout
