"""The lease of a local run: who is dead, and why (workers.local_lease)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.support.local_runs import gone_owner
from workers.local_lease import LEASE_S, UNVERIFIED_S, death_reason, owner_id, process_birth


def test_a_process_on_this_host_is_asked_directly() -> None:
    owner = gone_owner()
    reason = death_reason(owner, age_s=0.5)
    assert reason is not None and "is gone" in reason and owner in reason
    # alive here: a late heartbeat (the store was out) does not make it dead
    assert death_reason(owner_id(), age_s=10 * LEASE_S) is None
    assert owner_id().startswith(f"{socket.gethostname()}:{os.getpid()}:")


def test_a_process_elsewhere_is_judged_by_its_heartbeat() -> None:
    assert death_reason("other-host:123", age_s=LEASE_S / 2) is None
    reason = death_reason("other-host:123", age_s=LEASE_S + 5)
    assert reason is not None and "no heartbeat from its process (other-host:123)" in reason


def test_a_reused_pid_is_not_taken_for_the_run_s_process() -> None:
    # the run's process died and its PID went to another process: the row names a live PID
    # (this test's own) with the birth of the process that held it before
    mine = owner_id()
    host, pid, birth = mine.split(":", 2)
    boot, _, ticks = birth.rpartition(".")
    for earlier in (f"{boot}.{int(ticks) - 1}", f"{'0' * 8}{boot[8:]}.{ticks}"):  # or last boot
        reused = f"{host}:{pid}:{earlier}"
        reason = death_reason(reused, age_s=0.5)
        assert reason is not None and "belongs to another process" in reason, reason
        assert reused in reason
    assert death_reason(mine, age_s=10 * LEASE_S) is None  # the owner itself is alive


def test_process_birth_is_fixed_for_a_life_and_new_for_the_next() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        birth = process_birth(child.pid)
        assert birth is not None and birth == process_birth(child.pid)
        assert birth != process_birth(os.getpid())
        assert death_reason(f"{socket.gethostname()}:{child.pid}:{birth}", 0.5) is None
    finally:
        child.kill()
        child.wait()
    assert process_birth(child.pid) is None
    reason = death_reason(f"{socket.gethostname()}:{child.pid}:{birth}", 0.5)
    assert reason is not None and "is gone" in reason


def test_a_live_pid_that_cannot_be_checked_is_trusted_for_a_bound_only() -> None:
    # an owner stamped without a birth (an older version): host:pid of a live process
    legacy = f"{socket.gethostname()}:{os.getpid()}"
    assert death_reason(legacy, age_s=LEASE_S + 5) is None  # the store may have been out
    reason = death_reason(legacy, age_s=UNVERIFIED_S + 1)
    assert reason is not None and "cannot be told from another process" in reason


@pytest.mark.integration
def test_the_reaper_fails_a_run_whose_pid_was_reused(plain_url: str) -> None:
    import uuid

    import psycopg

    from tests.support.local_runs import start_local_run
    from tests.support.stores import FreshDatabase
    from workers.local_lease import reap_dead_local_runs

    db = FreshDatabase(plain_url)
    host, pid, birth = owner_id().split(":", 2)
    boot, _, ticks = birth.rpartition(".")
    reused, live = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        with psycopg.connect(db.url, autocommit=True) as conn:
            for run_id, owner in ((reused, f"{host}:{pid}:{boot}.{int(ticks) - 7}"),
                                  (live, owner_id())):  # fmt: skip
                start_local_run(conn, run_id, "reused", owner)
            dead = dict(reap_dead_local_runs(conn))
            assert set(dead) == {reused}
            status: dict[str, str] = dict(
                conn.execute(
                    "SELECT run_id::text, status FROM runs WHERE run_id IN (%s, %s)", (reused, live)
                ).fetchall()
            )
        assert status == {reused: "failed", live: "running"}
    finally:
        db.drop()
