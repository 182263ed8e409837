"""Glue between a stored run and what the CLI prints: the summary is always read back from the
store and computed by `analysis`, so the numbers printed are the numbers kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from analysis.load import load_levels, load_requests, load_run
from analysis.summary import level_summary, render_summary_table
from workers.store.connect import connect_store


def summarize_run(run_id: str, database_url: str | None = None) -> dict[str, Any]:
    """The `peakload run --json` summary of a stored run."""
    with connect_store(database_url, autocommit=True) as conn:
        run = load_run(conn, run_id)
        requests = load_requests(conn, run_id)
        levels = load_levels(conn, run_id)
    return level_summary(requests, levels, run)


def print_summary(summary: dict[str, Any], console: Console) -> None:
    console.print(render_summary_table(summary))
    if summary.get("valid") is False:
        console.print(
            "[bold red]INVALID MEASUREMENT[/]: the generator, not the server, may have "
            "shaped these numbers:"
        )
        for why in summary.get("invalid_reasons") or []:
            console.print(f"  - {why}")


def write_json(summary: dict[str, Any], path: str) -> None:
    """Write the summary atomically (a reader never sees half a file)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(p)
