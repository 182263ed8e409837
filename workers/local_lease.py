"""The lease of a local run, as distributed shards have theirs: the process running it stamps a
heartbeat every few seconds from a thread (which also hears `peakload abort`), and any command
that looks at the store marks a local run whose process is gone as `failed`, with why. A process
is named by host, PID and birth (boot id and start time), so a reused PID is not taken for it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from workers.store import runs as store_runs
from workers.store.connect import connect_store

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
# Past this without a heartbeat the process is gone (killed, out of memory, machine down):
# a live process stamps every HEARTBEAT_S even while its event loop is saturated.
LEASE_S = 20.0
# A live PID whose birth cannot be checked (an owner stamped by an older version, no /proc) is
# trusted over a late heartbeat only this long: past it the PID may be another process's.
UNVERIFIED_S = 300.0
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def process_birth(pid: int) -> str | None:
    """When process `pid` started, as "<boot id>.<start time in clock ticks since boot>"
    (/proc/PID/stat field 22): the same for a process's whole life, different for any other
    process that gets its PID later, in this boot or the next. None without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in (...) may hold spaces
    return f"{boot}.{fields[19]}" if len(fields) > 19 else None


def owner_id() -> str:
    """This process as a lease owner: host:pid, then :birth where /proc tells it."""
    pid = os.getpid()
    birth = process_birth(pid)
    return f"{socket.gethostname()}:{pid}" + (f":{birth}" if birth else "")


def _local_process(owner: str | None) -> str:
    """What `owner` (host:pid[:birth]) is on this host: "elsewhere" (another host, or no pid:
    only its heartbeat can tell), "gone", "reused" (the PID is alive but born later: another
    process), "alive" (born when the owner says) or "unverified" (alive, birth unknown)."""
    if not owner or ":" not in owner:
        return "elsewhere"
    host, pid, birth = [*owner.split(":", 2), ""][:3]
    if host != socket.gethostname() or not pid.isdigit():
        return "elsewhere"
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return "gone"
    except OSError:  # exists, owned by someone else
        pass
    now = process_birth(int(pid))
    if birth and now:
        return "alive" if birth == now else "reused"
    return "unverified"


def death_reason(owner: str | None, age_s: float, lease_s: float = LEASE_S) -> str | None:
    """Why a pending/running local run is dead, or None while its lease holds. A process on
    this host is asked directly: alive and born when the owner says, it is not declared dead
    for a late heartbeat (the store may just have been unreachable); a live PID whose birth
    cannot be checked is trusted for UNVERIFIED_S, no longer."""
    who = owner or "an unknown process"
    state = _local_process(owner)
    if state == "gone":
        return f"its process ({who}) is gone: killed or crashed before the run ended"
    if state == "reused":
        return (
            f"its process ({who}) is gone: killed or crashed before the run ended, and its "
            "PID now belongs to another process"
        )
    if state == "elsewhere" and age_s > lease_s:
        return (
            f"no heartbeat from its process ({who}) for {age_s:,.0f} s (lease {lease_s:g} s): "
            "killed, out of memory or its machine went down"
        )
    if state == "unverified" and age_s > max(lease_s, UNVERIFIED_S):
        return (
            f"no heartbeat from its process ({who}) for {age_s:,.0f} s: its PID is alive but "
            "cannot be told from another process that reused it"
        )
    return None


def reap_dead_local_runs(
    conn: psycopg.Connection[Any], lease_s: float = LEASE_S
) -> list[tuple[str, str]]:
    """Mark every local run whose process died `failed`; returns (run_id, reason) of each."""
    dead = []
    for run_id, owner, age in store_runs.live_local_runs(conn):
        reason = death_reason(owner, age, lease_s)
        if reason is not None:
            store_runs.fail_run(conn, run_id, reason)
            dead.append((run_id, reason))
    return dead


class LocalLease:
    """Stamps the run's heartbeat every HEARTBEAT_S on its own connection and thread (never on
    the measuring event loop); calls `on_abort(reason)` once when an abort is requested."""

    def __init__(self, url: str, run_id: str, on_abort: Callable[[str], None]) -> None:
        self.url, self.run_id, self.on_abort = url, run_id, on_abort
        self.abort_reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="peakload-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _main(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if conn is None or conn.closed:
                    conn = connect_store(self.url, autocommit=True)
                reason = store_runs.heartbeat(conn, self.run_id)
            except Exception as exc:  # the store is down: the writer spools; try again
                log.warning("run %s: heartbeat not stamped: %s", self.run_id, exc)
                if conn is not None:
                    conn.close()
                conn = None
                continue
            if reason is not None and self.abort_reason is None:
                self.abort_reason = reason
                self.on_abort(reason)
        if conn is not None:
            conn.close()
