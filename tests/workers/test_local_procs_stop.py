"""`peakload run --processes 2` stopped as a user stops it: Ctrl-C (SIGINT to the parent) or
`peakload abort RUN`; every measuring process ends within seconds, none is left behind, and the
run is `aborted` with what was measured kept. Also the plan and admission of a multi-process
run, without a server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from analysis.verdicts.exitcodes import Exit
from loadgen.checks import admission
from loadgen.errors import CapacityError
from loadgen.runspec.spec import RunSpec, spec_from_dict
from tests.support.sim import SimProcess
from workers import local_procs

ROOT = Path(__file__).resolve().parents[2]
STOP_WITHIN_S = 10.0


def children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with_kids = (task / "children").read_text().split()
        out.update(int(k) for k in with_kids)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def running_run(url: str, timeout_s: float = 60.0) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT run_id::text FROM runs WHERE status = 'running'").fetchone()
        if row:
            return str(row[0])
        time.sleep(0.2)
    raise AssertionError("the run never started")


@pytest.mark.integration
@pytest.mark.one_store  # tests/support/stores.py
@pytest.mark.parametrize("how", ["sigint", "abort"])
def test_ctrl_c_and_abort_stop_every_process_within_seconds(
    how: str, sim: SimProcess, store_url: str, tmp_path: Path
) -> None:
    spec = tmp_path / "long.toml"
    spec.write_text(
        f'name = "long"\n[target]\napi = "openai-chat"\nbase_url = "{sim.base_url}"\n'
        'model = "m"\n[workload]\nprompt_tokens = 16\noutput_tokens = 8\n'
        "[load]\nconcurrency = [8]\nduration_s = 60\n"
    )
    env = {**os.environ, "PEAKLOAD_DATABASE_URL": store_url, "PEAKLOAD_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "ui", "run", str(spec), "--processes", "2", "--quiet"]
    log = tmp_path / "stderr.txt"
    with log.open("wb") as err_file:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err_file)
    try:
        run_id = running_run(store_url)
        time.sleep(1.0)
        kids = children(proc.pid)
        names = {
            k: Path(f"/proc/{k}/cmdline").read_bytes().replace(b"\0", b" ")[:200] for k in kids
        }
        assert len(kids) >= 2, kids  # the two measuring processes (and multiprocessing's own)
        if how == "sigint":
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
        else:
            subprocess.run(
                [sys.executable, "-m", "ui", "abort", run_id], env=env, cwd=ROOT, check=True,
                capture_output=True, timeout=30,
            )  # fmt: skip
            t0 = time.monotonic()  # the abort is recorded: the run's stop is timed from here,
            # not the abort command's own start-up (seconds of imports on a loaded machine)
        code = proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert code == Exit.PARTIAL, err
    assert took < STOP_WITHIN_S, took
    # multiprocessing's resource tracker ends on its own once the parent's pipe closes
    end = time.monotonic() + 3.0
    while [k for k in kids if alive(k)] and time.monotonic() < end:
        time.sleep(0.05)
    left = {k: names.get(k) for k in kids if alive(k)}
    assert not left, f"outlived the run: {left}"
    with psycopg.connect(store_url) as conn:
        row = conn.execute(
            "SELECT r.status, (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id), "
            "(SELECT array_agg(DISTINCT state) FROM shards s WHERE s.run_id = r.run_id) "
            "FROM runs r WHERE r.run_id = %s",
            (run_id,),
        ).fetchone()
    assert row is not None
    assert row[0] == "aborted" and row[1] > 0 and row[2] == ["aborted"], row


def make_spec(load: dict[str, object], **rest: object) -> RunSpec:
    return spec_from_dict(
        {
            "name": "t",
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "load": {"duration_s": 10, **load},
            **rest,
        }
    )


def test_a_small_load_stays_in_one_process_a_large_one_gets_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert local_procs.default_processes(make_spec({"concurrency": [8]})) == 1
    big = make_spec({"concurrency": [64 * cores * 4]})
    assert local_procs.default_processes(big) == cores


def test_one_region_is_split_into_a_shard_per_process_with_the_users_added_up() -> None:
    spec = make_spec({"concurrency": [5, 9], "max_requests": 101})
    groups = local_procs.plan_processes(spec, "r", 3)
    assert [[p.shard_id for p in g] for g in groups] == [["local-0"], ["local-1"], ["local-2"]]
    plans = [p for g in groups for p in g]
    assert [sum(p.users_per_level[i] for p in plans) for i in range(2)] == [5, 9]
    assert sum(p.max_requests for p in plans) == 101
    assert sum(p.in_flight_cap() for p in plans) == 4096
    two = make_spec({"concurrency": [4]}, regions=[{"name": "a", "share": 0.5, "workers": 3},
                                                  {"name": "b", "share": 0.5}])  # fmt: skip
    ids = [[p.shard_id for p in g] for g in local_procs.plan_processes(two, "r", 2)]
    assert ids == [["a-0", "a-2"], ["a-1", "b-0"]]


def test_admission_sums_the_memory_of_every_process() -> None:
    spec = make_spec({"concurrency": [200]})
    per = admission.BASE_BYTES + 100 * admission.STREAM_BYTES
    # room for one process's memory, not two
    cap = admission.Capacity(16_384, int(per * 1.5 / admission.MEMORY_HEADROOM), 1 << 20, 1 << 20)
    one = local_procs.plan_processes(spec, "r", 1)
    local_procs.admit_machine(spec, one, cap)
    two = local_procs.plan_processes(spec, "r", 2)
    with pytest.raises(CapacityError, match="2 measuring processes holding 200 streams need"):
        local_procs.admit_machine(spec, two, cap)
