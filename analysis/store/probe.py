"""The parameter probe stored with a run (`run_probes`, written by workers.store.probes): read
back for the report, as rows for its table."""

from __future__ import annotations

import json
from typing import Any

import psycopg


def load_probe(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any] | None:
    """The run's probe result (api, model, probed_at, verdicts), or None when it had none."""
    try:
        row = conn.execute("SELECT result FROM run_probes WHERE run_id = %s", (run_id,)).fetchone()
    except psycopg.errors.UndefinedTable:  # a store from before the table existed
        conn.rollback()
        return None
    if row is None:
        return None
    value = row[0]
    out: dict[str, Any] = value if isinstance(value, dict) else json.loads(value)
    return out


def probe_rows(probe: dict[str, Any]) -> list[list[Any]]:
    return [[v["param"], v["verdict"], v.get("detail", "")] for v in probe.get("verdicts", [])]
