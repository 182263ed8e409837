"""The lease of a local run, as distributed shards have theirs: the process running it stamps a
heartbeat every few seconds from a thread (which also hears `peakload abort`), and any command
that looks at the store marks a local run whose process is gone as `failed`, with why.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from workers.store import runs as store_runs
from workers.store.connect import connect_store

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
# Past this without a heartbeat the process is gone (killed, out of memory, machine down):
# a live process stamps every HEARTBEAT_S even while its event loop is saturated.
LEASE_S = 20.0


def owner_id() -> str:
    """This process as a lease owner: host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _local_process(owner: str | None) -> bool | None:
    """Whether `owner` (host:pid) is alive, when it names a process on this host; None when it
    is elsewhere (only its heartbeat can tell)."""
    if not owner or ":" not in owner:
        return None
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def death_reason(owner: str | None, age_s: float, lease_s: float = LEASE_S) -> str | None:
    """Why a pending/running local run is dead, or None while its lease holds. A process on
    this host is asked directly: alive, it is not declared dead for a late heartbeat (the store
    may just have been unreachable)."""
    who = owner or "an unknown process"
    alive = _local_process(owner)
    if alive is False:
        return f"its process ({who}) is gone: killed or crashed before the run ended"
    if alive is None and age_s > lease_s:
        return (
            f"no heartbeat from its process ({who}) for {age_s:,.0f} s (lease {lease_s:g} s): "
            "killed, out of memory or its machine went down"
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
