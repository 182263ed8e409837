"""How a local run that fails after its row exists says so: `failed` with its reason at once,
through a store outage too (reconnecting for up to FAIL_RETRY_S), or, past that, a sentence in
the failure it raises saying the store was not told (the run's lease ends it later).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psycopg

from loadgen.errors import StoreError
from workers.store import runs as store_runs
from workers.store.connect import open_connection

FAIL_RETRY_S = 30.0  # how long a failing run retries saying so through a store outage


def record_failure(conn: Any, url: str, run_id: str, reason: str) -> tuple[Any, str | None]:
    """End the run `failed` with `reason` now, reconnecting through a store outage for up to
    FAIL_RETRY_S. Returns the connection (maybe a new one) and, if the store could not be told,
    a sentence saying so (the lease ends the run later: workers.local_lease)."""
    end = time.monotonic() + FAIL_RETRY_S
    delay = 0.25
    while True:
        try:
            if conn.closed or conn.broken:
                conn = open_connection(url)
            store_runs.fail_run(conn, run_id, reason)
            return conn, None
        except (psycopg.Error, StoreError) as exc:
            if time.monotonic() >= end:
                return conn, (
                    f"the store could not be told ({type(exc).__name__}: {exc}); the run row "
                    "keeps its status until its lease expires"
                )
            with contextlib.suppress(Exception):
                conn.close()
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
