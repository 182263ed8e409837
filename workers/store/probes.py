"""The `run_probes` table: one probe result per run (loadgen.targets.probe), written once the
run exists (analysis.store.probe reads it back for the report)."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from loadgen.scrub import scrub_tree


def save_probe(conn: psycopg.Connection[Any], run_id: str, result: dict[str, Any]) -> None:
    """Store `result` scrubbed (loadgen.scrub): its details are server answers."""
    result = scrub_tree(result)
    conn.execute(
        "INSERT INTO run_probes (run_id, probed_at, target, result) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (run_id) DO UPDATE SET probed_at = EXCLUDED.probed_at,"
        " target = EXCLUDED.target, result = EXCLUDED.result",
        (run_id, result["probed_at"], result["target"], json.dumps(result)),
    )
    if not conn.autocommit:
        conn.commit()
