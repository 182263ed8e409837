"""A JSON document stored beside a run in a table of its own (one row per run: `run_probes`,
`run_imports`, ...), read back as a dict; None when the run has none, or when the store is from
before that table existed."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg import sql


def run_document(
    conn: psycopg.Connection[Any], table: str, column: str, run_id: str
) -> dict[str, Any] | None:
    query = sql.SQL("SELECT {} FROM {} WHERE run_id = %s").format(
        sql.Identifier(column), sql.Identifier(table)
    )
    try:
        row = conn.execute(query, (run_id,)).fetchone()
    except psycopg.errors.UndefinedTable:
        conn.rollback()
        return None
    if row is None:
        return None
    value = row[0]
    out: dict[str, Any] = value if isinstance(value, dict) else json.loads(value)
    return out
