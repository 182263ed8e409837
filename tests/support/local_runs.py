"""Local runs in a store for tests of the reaper and of what lists runs: an owner whose process
has exited, and a run created and started under a given owner (workers.store.runs)."""

from __future__ import annotations

import socket
import subprocess
import sys
from typing import Any

import psycopg

from loadgen.runspec.spec import spec_from_dict
from workers.store import runs as store_runs


def gone_owner() -> str:
    """`host:pid` of a process on this host that has exited: a local run's owner that died."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return f"{socket.gethostname()}:{gone.stdout.strip()}"


def start_local_run(
    conn: psycopg.Connection[Any], run_id: str, name: str, owner: str | None
) -> None:
    """A local run of a one-stream spec (to an unused port), created and started (`running`)
    under `owner`."""
    spec = spec_from_dict(
        {
            "name": name,
            "target": {"api": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
            "load": {"concurrency": [1], "duration_s": 1.0},
        }
    )
    store_runs.create_run(conn, run_id, spec, mode="local", owner=owner)
    store_runs.start_run(conn, run_id)
