"""C6: schedule slots fire exactly once even with several schedulers (threads calling `tick`, and
two real `celery beat` processes), and a slot missed while everything was down is reported."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from loadgen.errors import SpecError
from loadgen.runspec.spec import RunSpec
from tests.support.celery_workers import REPO, stop_process
from tests.workers.distributed.helpers import make_spec
from workers.schedules import add_schedule, list_schedules, slots_between, tick

pytestmark = [pytest.mark.integration]


def _spec() -> RunSpec:
    return make_spec("http://127.0.0.1:9/v1", [("a", 1.0)], name="nightly")


def test_slots_between_is_exclusive_inclusive() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    got = slots_between("0 2 * * *", t0, t0 + timedelta(days=3))
    assert got == [t0 + timedelta(days=d, hours=2) for d in range(3)]
    assert slots_between("0 2 * * *", got[0], got[0]) == []


def test_bad_cron_and_duplicate_name(store_url: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        with pytest.raises(SpecError, match="cron"):
            add_schedule(conn, "x", "0 25 * * *", _spec())
        add_schedule(conn, "x", "0 2 * * *", _spec())
        with pytest.raises(SpecError, match="exists already"):
            add_schedule(conn, "x", "0 3 * * *", _spec())


def test_concurrent_ticks_claim_each_slot_once_and_report_missed(store_url: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        add_schedule(conn, "hourly", "0 * * * *", _spec())
        now = datetime.now(UTC).replace(minute=0, second=30, microsecond=0)
        # the scheduler was down for 5 hours: 4 slots are long past, the latest is due now
        conn.execute("UPDATE schedules SET last_checked = %s", (now - timedelta(hours=5),))
    launched: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)
    outcomes: list[Any] = []

    def launch(run_id: str, spec: RunSpec, name: str) -> None:
        with lock:
            launched.append(run_id)

    def beat(i: int) -> None:
        with psycopg.connect(store_url, autocommit=True) as c:
            barrier.wait()
            got = tick(c, launch, now=now, owner=f"beat-{i}")
            with lock:
                outcomes.extend(got)

    threads = [threading.Thread(target=beat, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(o.state for o in outcomes) == ["fired", "missed", "missed", "missed", "missed"]
    assert len(launched) == 1
    with psycopg.connect(store_url, autocommit=True) as conn:
        (row,) = list_schedules(conn, now=now)
        assert row["missed"] == 4 and len(row["missed_recent"]) == 4
        assert row["last_fired"] == now.replace(second=0)
        assert row["next_slot"] == now.replace(second=0) + timedelta(hours=1)
        # a later tick finds nothing new
        assert tick(conn, launch, now=now + timedelta(seconds=5)) == []


@pytest.mark.slow
def test_two_beat_processes_fire_each_slot_once(
    cluster_env: dict[str, str], tmp_path: Path
) -> None:
    store_url = cluster_env["PEAKLOAD_DATABASE_URL"]
    with psycopg.connect(store_url, autocommit=True) as conn:
        add_schedule(conn, "every2s", "* * * * * */2", _spec())
    env = {**cluster_env, "PEAKLOAD_SCHEDULE_TICK_S": "0.5"}
    beats = []
    logfiles = [(tmp_path / f"beat{i}.log").open("wb") for i in range(2)]
    for i, log in enumerate(logfiles):
        beats.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "workers.app",
                    "beat",
                    "-S",
                    "workers.schedules:PgScheduler",
                    "--loglevel",
                    "info",
                    "--max-interval",
                    "1",
                    "-s",
                    str(tmp_path / f"beat{i}.db"),
                ],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    try:
        time.sleep(9)
    finally:
        for b in beats:
            stop_process(b)
        for f in logfiles:
            f.close()
    logs = "".join((tmp_path / f"beat{i}.log").read_text() for i in range(2))
    with psycopg.connect(store_url, autocommit=True) as conn:
        slots = conn.execute(
            "SELECT slot, state, run_id, claimed_by FROM schedule_slots ORDER BY slot"
        ).fetchall()
        fired = [s for s in slots if s[1] == "fired"]
        assert len(fired) >= 3, logs[-3000:]
        assert len({s[0] for s in slots}) == len(slots)  # one row per slot
        runs = conn.execute("SELECT run_id FROM runs WHERE schedule_name = 'every2s'").fetchall()
        assert sorted(str(r[0]) for r in runs) == sorted(str(s[2]) for s in fired)
        # both schedulers were really ticking (each owns some slots, or at least both ran)
        assert logs.count("beat: Starting") == 2


@pytest.mark.slow
def test_a_fired_slot_is_started_by_the_control_worker(
    cluster: Any, cluster_env: dict[str, str], sim_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The beat's path end to end: claim the slot, create the run, send `peakload.start_run`
    to the control queue; the control worker plans, dispatches and starts it; a region worker
    runs it to completion."""
    from workers.app import SCHEDULER_QUEUE, TASK_START_RUN, make_app
    from workers.schedules import create_scheduled_run

    monkeypatch.setenv("PEAKLOAD_ALLOW_PRIVATE_TARGETS", "1")
    cluster.start("a")
    cluster.start("control", queues=SCHEDULER_QUEUE)
    url = cluster_env["PEAKLOAD_DATABASE_URL"]
    app = make_app(cluster_env["PEAKLOAD_REDIS_URL"])
    spec = make_spec(sim_server.base_url, [("a", 1.0)], rate=5, duration_s=2, name="nightly")
    with psycopg.connect(url, autocommit=True) as conn:
        add_schedule(conn, "nightly", "0 2 * * *", spec)
        conn.execute(
            "UPDATE schedules SET last_checked = %s", (datetime(2026, 1, 1, 1, 59, tzinfo=UTC),)
        )

        def launch(run_id: str, s: RunSpec, name: str) -> None:
            create_scheduled_run(conn, run_id, s, name)
            app.send_task(TASK_START_RUN, args=[run_id], queue=SCHEDULER_QUEUE)

        (fired,) = tick(conn, launch, now=datetime(2026, 1, 1, 2, 0, 5, tzinfo=UTC))
        assert fired.state == "fired" and fired.run_id is not None

        def ended() -> Any:
            row = conn.execute(
                "SELECT status FROM runs WHERE run_id = %s", (fired.run_id,)
            ).fetchone()
            return row is not None and row[0] not in ("pending", "running") and row[0]

        from tests.workers.distributed.helpers import wait_for

        assert wait_for(ended, 60, "the scheduled run to end") == "completed", cluster.logs()[
            -3000:
        ]
        (row,) = list_schedules(conn)
        assert row["last_run_status"] == "completed"
        n = conn.execute(
            "SELECT count(*) FROM requests WHERE run_id = %s", (fired.run_id,)
        ).fetchone()
        assert n is not None and n[0] == 10


def test_schedule_commands(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from ui.cli import cli

    monkeypatch.setenv("PEAKLOAD_DATABASE_URL", store_url)
    spec_path = tmp_path / "nightly.toml"
    spec_path.write_text(
        'name = "nightly"\n[target]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'model = "m"\n[load]\nrate = [1.0]\nduration_s = 5\n'
    )
    run = CliRunner().invoke
    ok = run(cli, ["schedule", "add", str(spec_path), "--cron", "0 2 * * *"])
    assert ok.exit_code == 0, ok.output
    assert "schedule 'nightly' added" in ok.output
    bad = run(cli, ["schedule", "add", str(spec_path), "--cron", "every night", "--name", "x"])
    assert bad.exit_code == 2 and "--cron: not a valid cron expression" in bad.output
    listed = run(cli, ["schedule", "list"])
    assert listed.exit_code == 0 and "nightly" in listed.output and "0 2 * * *" in listed.output
    assert run(cli, ["schedule", "remove", "nightly"]).exit_code == 0
    gone = run(cli, ["schedule", "remove", "nightly"])
    assert gone.exit_code == 6 and "no schedule named 'nightly'" in gone.output


def test_worker_command_line() -> None:
    from ui.commands.worker import celery_argv

    argv = celery_argv("eu-west", 3, control=False, beat=False, loglevel="info")
    assert argv[1:5] == ["-m", "celery", "-A", "workers.app"]
    i = argv.index("-Q")
    assert argv[i + 1] == "region.eu-west"
    assert argv[argv.index("--pool") + 1] == "prefork"
    assert argv[argv.index("--concurrency") + 1] == "3"
    ctl = celery_argv(None, 1, control=True, beat=False, loglevel="info")
    assert ctl[ctl.index("-Q") + 1] == "peakload.control"
    beat = celery_argv(None, 1, control=False, beat=True, loglevel="info")
    assert beat[beat.index("-S") + 1] == "workers.schedules:PgScheduler"
