"""The control thread beside a running shard: renews the lease, polls the run's start time and
abort flag in PostgreSQL, and sets the shard's asyncio abort event when the run is aborted or
this worker has been fenced out. Its own connection; never touches the event loop but through
`call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import psycopg

from workers import leases, runctl
from workers.store.connect import pg_connect

log = logging.getLogger(__name__)

POLL_S = 0.2  # abort and start-time poll period: a run stops within about a second


class ShardControl(threading.Thread):
    def __init__(self, database_url: str, lease: leases.Lease, ttl_s: float) -> None:
        super().__init__(name=f"peakload-control-{lease.shard_id}", daemon=True)
        self._url = database_url
        self._lease = lease
        self._ttl_s = ttl_s
        self._stop_ev = threading.Event()
        self._start_ev = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._abort: asyncio.Event | None = None
        self.start_at_ref_ns: int | None = None
        self.abort_reason: str | None = None
        self.fenced_out = False
        self._finishing = threading.Event()

    def finishing(self) -> None:
        """The shard is writing its final state: from now on its lease ends with it, and a
        renewal that finds it gone is that, not a fence (the lease keeps being renewed until
        then, through a store outage's retries)."""
        self._finishing.set()

    def bind_abort(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        """Attach the runner's abort event; set at once if the abort came first."""
        with self._lock:
            self._loop, self._abort = loop, event
            if self.abort_reason is not None:
                loop.call_soon_threadsafe(event.set)

    def wait_for_start(self, timeout_s: float) -> int | None:
        """Block until the coordinator publishes a start time (reference ns); None on abort or
        timeout (then `abort_reason` says why, if it was an abort)."""
        self._start_ev.wait(timeout_s)
        with self._lock:
            if self.abort_reason is not None:
                return None
            return self.start_at_ref_ns

    def stop(self) -> None:
        self._stop_ev.set()
        self.join(timeout=5)

    def _trigger_abort(self, reason: str) -> None:
        with self._lock:
            if self.abort_reason is None:
                self.abort_reason = reason
                log.warning("shard %s: stopping: %s", self._lease.shard_id, reason)
            if self._loop is not None and self._abort is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._abort.set)
        self._start_ev.set()

    def run(self) -> None:
        renew_every_ns = int(self._ttl_s / 3 * 1e9)
        last_renew = time.perf_counter_ns()
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        while not self._stop_ev.is_set():
            try:
                if conn is None or conn.closed:
                    conn = pg_connect(self._url, autocommit=True, connect_timeout=5)
                now = time.perf_counter_ns()
                if now - last_renew >= renew_every_ns:
                    if not leases.renew_lease(conn, self._lease, self._ttl_s):
                        if self._finishing.is_set():
                            break  # the final state is written: the lease went with it
                        self.fenced_out = True
                        self._trigger_abort("fenced out: lease lost (the shard was reaped)")
                    last_renew = now
                ctl = runctl.read_control(conn, self._lease.run_id)
                if ctl is not None:
                    if ctl.abort_requested:
                        self._trigger_abort(f"run aborted: {ctl.abort_reason}")
                    elif ctl.start_at_ref_ns is not None and self.start_at_ref_ns is None:
                        with self._lock:
                            self.start_at_ref_ns = int(ctl.start_at_ref_ns)
                        self._start_ev.set()
            except psycopg.Error as exc:
                # PostgreSQL down (D3): the lease cannot be renewed; the shard keeps running and
                # spooling; if the outage outlasts the TTL the reaper will interrupt it.
                log.warning("shard %s: control poll failed: %s", self._lease.shard_id, exc)
                if conn is not None:
                    conn.close()
                conn = None
            self._stop_ev.wait(POLL_S)
        if conn is not None:
            conn.close()
