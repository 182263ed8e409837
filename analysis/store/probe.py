"""The parameter probe stored with a run (`run_probes`, written by workers.store.probes): read
back for the report, as rows for its table."""

from __future__ import annotations

from typing import Any

import psycopg

from analysis.store.runjson import run_document


def load_probe(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any] | None:
    """The run's probe result (api, model, probed_at, verdicts), or None when it had none."""
    return run_document(conn, "run_probes", "result", run_id)


def probe_rows(probe: dict[str, Any]) -> list[list[Any]]:
    return [[v["param"], v["verdict"], v.get("detail", "")] for v in probe.get("verdicts", [])]
