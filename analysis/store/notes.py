"""Reading what people added to runs (deploy/sql/0230: `run_tags`, `run_notes`; written by
workers/store/run_notes.py). A run's tags also come with every row of `load.load_runs`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg


@dataclass(frozen=True, slots=True)
class Note:
    note_id: int
    author: str | None
    body: str
    created_at: datetime  # UTC


def load_tags(conn: psycopg.Connection[Any], run_id: str) -> list[str]:
    """The run's tags, alphabetically."""
    rows = conn.execute(
        "SELECT tag FROM run_tags WHERE run_id = %s ORDER BY tag", (run_id,)
    ).fetchall()
    return [str(r[0]) for r in rows]


def load_notes(conn: psycopg.Connection[Any], run_id: str) -> list[Note]:
    """The run's notes, oldest first."""
    rows = conn.execute(
        "SELECT note_id, author, body, created_at FROM run_notes WHERE run_id = %s "
        "ORDER BY created_at, note_id",
        (run_id,),
    ).fetchall()
    return [Note(int(i), None if a is None else str(a), str(b), c) for i, a, b, c in rows]
