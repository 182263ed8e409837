"""What an imported run says about its import (`run_imports`, written by workers/imports/store.py):
the tool, its version, the file, what was imported and what the tool did not record."""

from __future__ import annotations

from typing import Any

import psycopg

from analysis.store.runjson import run_document


def load_import(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any] | None:
    """The import's notes (tool, tool_version, source, requests, latency_from, imported[],
    missing[], config{}), or None for a run peakload measured itself."""
    return run_document(conn, "run_imports", "notes", run_id)


def import_lines(notes: dict[str, Any]) -> list[str]:
    """The sentences `report` and the Run page print about an import."""
    head = f"imported from {notes.get('tool')} {notes.get('tool_version') or '(version unknown)'}"
    lines = [f"{head}: {notes.get('source')} ({notes.get('requests')} requests)"]
    lines += [f"imported: {s}" for s in notes.get("imported", [])]
    lines += [f"not recorded: {s}" for s in notes.get("missing", [])]
    return lines
