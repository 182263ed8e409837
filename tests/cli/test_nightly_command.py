"""`peakload nightly` on a real store (plain PostgreSQL and TimescaleDB): a schedule's history of
stored runs with a step that must be found, a flat one that must not, too few runs, and bad input
that fails with one message, exit 2 and no file written; the newest run's own state first."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from tests.analysis.storedata import insert_run, level_row, request_row, run_row, streamed
from tests.support.ports import free_port
from ui.cli import cli

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 10, 1, 2, 0, tzinfo=dt.UTC)
SCHEDULE = "nightly-a"
PER_RUN = 40  # requests; TTFT ttft_ms + (i % 5) ms, so a run's p50 is ttft_ms + 2


def store_night(
    conn: psycopg.Connection[Any],
    night: int,
    ttft_ms: float,
    *,
    decode_ms: float = 1000.0,
    schedule: str = SCHEDULE,
    valid: bool | None = True,
    status: str = "completed",
    failed: bool = False,
) -> str:
    """One stored run of `schedule`, created `night` days after T0: PER_RUN ok steady requests
    whose first token comes `ttft_ms` (+0..4 ms) after the send and 99 more tokens `decode_ms`
    later (output speed 99 / decode_s tokens/s); with `failed`, every request is a 503."""
    rid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{schedule}/{night}"))
    reqs = []
    for i in range(PER_RUN):
        first_us = int(1000 * (ttft_ms + i % 5))
        if failed:
            reqs.append(request_row(rid, i, outcome="http_error", http_status=503, end_ns=3_000))
        else:
            offsets = [first_us, first_us + int(1000 * decode_ms)]
            reqs.append(streamed(rid, i, sent_ns=0, offsets_us=offsets, tokens=[1, 99]))
    when = T0 + dt.timedelta(days=night)
    run = run_row(
        rid,
        name=f"{schedule} {night}",
        schedule_name=schedule,
        valid=valid,
        status=status,
        created_at=when,
        started_at=when + dt.timedelta(seconds=5),
        requests_scheduled=PER_RUN,
    )
    insert_run(conn, run, [level_row(rid)], reqs)
    return rid


def store_history(url: str, ttfts: list[float], **kw: Any) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [store_night(conn, night, t, **kw) for night, t in enumerate(ttfts)]


def nightly(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["nightly", *args], env={"COLUMNS": "240", **(env or {})})


def jitter(night: int) -> float:
    """A few ms of night-to-night noise (deterministic)."""
    return float((night * 7) % 5)


@pytest.mark.parametrize(
    ("metric", "before", "after", "code", "worse"),
    [
        ("ttft_ms", 100.0, 180.0, 1, True),  # latency up: a regression
        ("ttft_ms", 180.0, 100.0, 0, False),  # latency down: an improvement
        ("output_speed_tps", 100.0, 180.0, 1, True),  # decode slower: output speed fell
        ("output_speed_tps", 180.0, 100.0, 0, False),
    ],
)
def test_a_step_is_found_and_judged_by_direction(
    store_url: str,
    tmp_path: Path,
    metric: str,
    before: float,
    after: float,
    code: int,
    worse: bool,
) -> None:
    ttfts = [before + jitter(k) for k in range(8)] + [after + jitter(k) for k in range(8, 14)]
    with psycopg.connect(store_url, autocommit=True) as conn:
        # TTFT and decode time step together: latency up means output speed down
        ids = [store_night(conn, k, t, decode_ms=10 * t) for k, t in enumerate(ttfts)]
        # an invalid run in the new level with a wild value, and another schedule's runs
        store_night(conn, 14, 900.0, decode_ms=9000.0, valid=False)
        for k in range(6):
            store_night(conn, k, 500.0 + 100 * (k % 2), schedule="other")
    out = tmp_path / "h.json"
    res = nightly(
        SCHEDULE, "--metric", metric, "--percentile", "50", "--json", str(out), "--store", store_url
    )
    data = json.loads(out.read_text())
    # the newest run is the invalid one: the job fails on it whatever the history says
    assert res.exit_code == 4 and data["exit_code"] == 4, res.output
    assert (
        data["newest_run_problem"] == f"the newest run {data['runs'][14]['run_id'][:8]} is invalid"
    )
    assert data["schedule"] == SCHEDULE and data["metric"] == metric
    assert data["higher_is_better"] is (metric == "output_speed_tps")
    assert [r["run_id"] for r in data["runs"]][:14] == ids and len(data["runs"]) == 15
    assert data["runs_used"] == 14 and data["min_runs"] == 6
    bad = data["runs"][14]
    assert bad["valid"] is False and bad["used"] is False and bad["excluded"] == "invalid"
    assert bad["segment"] is None and bad["value"] is not None
    [cp] = data["change_points"]
    assert cp["index"] == 8 and cp["run_id"] == ids[8] and data["runs"][8]["change_point"]
    assert [r["segment"] for r in data["runs"][:14]] == [0] * 8 + [1] * 6
    values = [r["value"] for r in data["runs"][:14]]
    if metric == "ttft_ms":
        assert values == [t + 2 for t in ttfts]  # p50 of ttft + (0..4)
        expect_before = sum(values[:8]) / 8
        expect_after = sum(values[8:]) / 6
    else:
        assert values == pytest.approx([99_000 / (10 * t) for t in ttfts])
        expect_before = sum(values[:8]) / 8
        expect_after = sum(values[8:]) / 6
    assert cp["before"] == pytest.approx(expect_before)
    assert cp["after"] == pytest.approx(expect_after)
    assert cp["delta_pct"] == pytest.approx(100 * (expect_after / expect_before - 1))
    assert cp["direction"] == ("up" if expect_after > expect_before else "down")
    assert cp["worse"] is worse and cp["regression"] is worse
    assert data["latest_change_point"] == cp
    assert data["deciding_change_point"] == (cp if abs(cp["delta_pct"]) > 5 else None)
    assert data["detection_verdict"] == ("regression" if worse else "no regression")
    assert data["detection_exit_code"] == code
    # the table: every run, the invalid one marked and left out, the change point with its size
    assert ids[8][:8] in res.output and "INVALID" in res.output
    assert "excluded: invalid" in res.output
    assert "shown but excluded from the change-point detection" in res.output
    assert f"{cp['delta_pct']:+.1f}%" in res.output
    assert ("REGRESSION" in res.output) is worse
    # the same step under a threshold above its size is no regression
    loose = nightly(
        SCHEDULE,
        "--metric",
        metric,
        "--percentile",
        "50",
        "--threshold",
        "90",
        "--store",
        store_url,
    )
    assert loose.exit_code == 4, loose.output
    assert "every change point is within the 90% threshold" in loose.output


def test_a_small_later_shift_does_not_hide_a_regression(store_url: str, tmp_path: Path) -> None:
    means = [100.0] * 8 + [180.0] * 6 + [188.0] * 5  # +76%, then +4.4% (under 5%)
    ids = store_history(store_url, [m + jitter(k) for k, m in enumerate(means)])
    out = tmp_path / "h.json"
    res = nightly(SCHEDULE, "--percentile", "50", "--json", str(out), "--store", store_url)
    assert res.exit_code == 1, res.output
    data = json.loads(out.read_text())
    assert [p["run_id"] for p in data["change_points"]] == [ids[8], ids[14]]
    small, big = data["latest_change_point"], data["deciding_change_point"]
    assert small["run_id"] == ids[14] and small["worse"] and not small["regression"]
    assert 0 < small["delta_pct"] < 5 and big["run_id"] == ids[8] and big["delta_pct"] > 70
    assert f"REGRESSION at the latest change point beyond the 5% threshold (run {ids[8][:8]})" in (
        res.output
    )
    # a fix lands: the latest large change is an improvement
    with psycopg.connect(store_url, autocommit=True) as conn:
        for k in range(19, 23):
            store_night(conn, k, 100.0 + jitter(k))
    fixed = nightly(SCHEDULE, "--percentile", "50", "--json", str(out), "--store", store_url)
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(out.read_text())["deciding_change_point"]["run_id"] != ids[8]
    assert "is an improvement" in fixed.output


def test_flat_history_has_no_change_point(store_url: str, tmp_path: Path) -> None:
    ttfts = [100.0 + jitter(k) for k in range(14)]
    ids = store_history(store_url, ttfts)
    with psycopg.connect(store_url, autocommit=True) as conn:
        store_night(conn, 20, 0.0, failed=True)  # no ok request: no value
        store_night(conn, 21, 400.0, valid=False)  # an invalid outlier
        store_night(conn, 22, 420.0, valid=None, status="running")  # not ended yet
        store_night(conn, 23, 104.0)
    out = tmp_path / "flat.json"
    env = {"PEAKLOAD_DATABASE_URL": store_url}  # the store every command finds by default
    res = nightly(SCHEDULE, "--json", str(out), env=env)
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["change_points"] == [] and data["latest_change_point"] is None
    assert data["verdict"] == "no regression" and data["runs_used"] == 15
    assert [r["run_id"] for r in data["runs"]][:14] == ids
    excluded = {r["name"]: r["excluded"] for r in data["runs"] if not r["used"]}
    assert excluded == {
        f"{SCHEDULE} 20": "no value (no ok steady requests)",
        f"{SCHEDULE} 21": "invalid",
        f"{SCHEDULE} 22": "not ended (validity unknown)",
    }
    assert data["runs"][14]["value"] is None and data["runs"][14]["n"] == 0
    assert "No change point" in res.output and "3 of 18 runs left out" in res.output
    # the window: --last and --since choose the newest runs
    last = nightly(SCHEDULE, "--last", "5", "--json", str(out), env=env)
    assert last.exit_code == 3, last.output  # 2 usable of 5: too few
    assert json.loads(out.read_text())["runs"][0]["name"] == f"{SCHEDULE} 13"
    since = nightly(SCHEDULE, "--since", "2026-10-10", "--json", str(out), env=env)
    got = json.loads(out.read_text())
    assert since.exit_code == 0 and got["runs"][0]["name"] == f"{SCHEDULE} 9"
    assert got["since"] == "2026-10-10T00:00:00+00:00" and got["runs_used"] == 6
    # with the invalid and unended runs in, their outliers are what the detection finds
    loose = nightly(SCHEDULE, "--include-invalid", "--json", str(out), env=env)
    got = json.loads(out.read_text())
    assert got["invalid_runs_in_detection"] is True and got["runs_used"] == 17
    assert "included in the change-point detection" in loose.output


def test_too_few_runs_exit_3(store_url: str, tmp_path: Path) -> None:
    # five usable runs (two more are invalid): a change needs 3 runs on each side
    store_history(store_url, [100.0, 101.0, 102.0, 200.0, 201.0])
    with psycopg.connect(store_url, autocommit=True) as conn:
        # before the history: the newest run is a usable one (else it alone would decide)
        store_night(conn, -2, 203.0, valid=False)
        store_night(conn, -1, 204.0, valid=False)
    out = tmp_path / "few.json"
    res = nightly(SCHEDULE, "--json", str(out), "--store", store_url)
    assert res.exit_code == 3, res.output
    data = json.loads(out.read_text())
    assert data["verdict"] == "too few runs" and data["exit_code"] == 3
    assert data["runs_used"] == 5 and len(data["runs"]) == 7 and data["change_points"] == []
    assert "Too few runs to decide: 5 usable" in res.output and "at least 6" in res.output


def count_rows(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM requests)")
        got = row.fetchone()
        assert got is not None
        return int(got[0]), int(got[1])


def test_bad_input_one_message_exit_2_nothing_written(store_url: str, tmp_path: Path) -> None:
    store_history(store_url, [100.0 + jitter(k) for k in range(7)])
    before = count_rows(store_url)
    out = tmp_path / "bad.json"
    unreachable = f"postgresql://peakload@127.0.0.1:{free_port()}/peakload"
    cases: list[tuple[list[str], str]] = [
        (
            ["no-such-schedule"],
            f"no runs of schedule 'no-such-schedule' in the store; schedules with runs: {SCHEDULE}",
        ),
        ([SCHEDULE, "--metric", "itl_ms"], "Invalid value for '--metric': 'itl_ms'"),
        ([SCHEDULE, "--percentile", "150"], "Invalid value for '--percentile': 150"),
        ([SCHEDULE, "--percentile", "p99"], "Invalid value for '--percentile': 'p99'"),
        ([SCHEDULE, "--since", "yesterday"], "Invalid value for '--since': 'yesterday'"),
        ([SCHEDULE, "--level", "4"], f"level 4: no run of schedule '{SCHEDULE}'"),
        ([SCHEDULE, "--last", "0"], "Invalid value for '--last'"),
        ([], "Missing argument 'SCHEDULE'"),
    ]
    for args, expected in cases:
        res = nightly(*args, "--json", str(out), "--store", store_url)
        missing = args == ["no-such-schedule"]
        assert res.exit_code == (6 if missing else 2), (args, res.output)
        assert expected in res.stderr, (args, res.stderr)
        assert [ln for ln in res.stderr.splitlines() if ln.startswith("Error")] == [
            ln for ln in res.stderr.splitlines() if expected in ln
        ], res.stderr
        assert res.stdout == "" and "Traceback" not in res.output
        assert not out.exists(), args
    res = nightly(SCHEDULE, "--json", str(out), "--store", unreachable)
    assert res.exit_code == 2 and not out.exists()
    [line] = res.stderr.splitlines()
    assert line.startswith("Error: cannot connect to the store at postgresql://peakload@127.0.0.1")
    assert count_rows(store_url) == before


@pytest.mark.parametrize(
    ("newest", "code"),
    [
        ({"valid": False}, 4),
        ({"valid": None, "status": "running"}, 5),
        ({"status": "partial"}, 5),
        ({"failed": True}, 3),  # every request failed: no TTFT to place in the history
    ],
)
def test_the_newest_run_must_be_usable(store_url: str, newest: dict[str, Any], code: int) -> None:
    store_history(store_url, [100.0 + jitter(k) for k in range(8)])
    with psycopg.connect(store_url, autocommit=True) as conn:
        store_night(conn, 8, 101.0, **newest)
    res = nightly(SCHEDULE, "--store", store_url)
    assert res.exit_code == code, res.output
    assert "But the newest run" in res.output
    judged_alone = nightly(SCHEDULE, "--store", store_url, "--include-invalid")
    assert judged_alone.exit_code == (3 if newest.get("failed") else 0), judged_alone.output


def test_error_rate_is_a_nightly_metric(store_url: str, tmp_path: Path) -> None:
    # 8 clean nights, then 6 where every request fails: the error rate went from 0 to 1
    store_history(store_url, [100.0] * 8)
    with psycopg.connect(store_url, autocommit=True) as conn:
        for k in range(8, 14):
            store_night(conn, k, 100.0, failed=True)
    out = tmp_path / "err.json"
    res = nightly(SCHEDULE, "--metric", "error_rate", "--json", str(out), "--store", store_url)
    data = json.loads(out.read_text())
    assert [r["value"] for r in data["runs"]] == [0.0] * 8 + [1.0] * 6
    assert res.exit_code == 1 and data["verdict"] == "regression", res.output
    assert data["unit"] == "fraction" and data["change_points"][0]["index"] == 8
