"""`peakload runs`: list stored runs (the store connection and run references every command
shares are in ui/commands/store_refs.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import pandas as pd
import psycopg
from rich.table import Table

from analysis.store.load import load_runs
from loadgen.errors import StoreError
from ui.commands.store_refs import analysis_store, fail, reap_dead_runs
from ui.output import FORMATS, stdout_console, write_plain


def _labels_text(labels: Any) -> str:
    if not isinstance(labels, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in labels.items() if v not in (None, {}, []))


def _validity(v: Any) -> str:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return "?"
    return "valid" if bool(v) else "INVALID"


@click.command("runs")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--name", "name_like", help="runs whose name contains this")
@click.option(
    "--status",
    type=click.Choice(["pending", "running", "completed", "partial", "aborted", "failed"]),
)
@click.option("--schedule", "schedule_name", help="runs of this nightly schedule")
@click.option("--model", help="runs against this model")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="runs whose labels include KEY=VALUE (repeatable)",
)
@click.option("--owner", "launched_by", metavar="NAME", help="runs this person launched")
@click.option("--preset", help="runs whose target used this preset")
@click.option("--tag", help="runs tagged so")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table; plain (tab-separated, full ids); json (one object per line)",
)
@click.option("--json", "as_json", is_flag=True, help="same as --format json")
def runs_command(
    limit: int,
    name_like: str | None,
    status: str | None,
    schedule_name: str | None,
    model: str | None,
    labels: tuple[str, ...],
    launched_by: str | None,
    preset: str | None,
    tag: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """List stored runs, newest first. A local run whose process died is marked `failed`
    (with why) before it is listed."""
    want: dict[str, Any] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--label")
        want[key] = value
    try:
        with analysis_store() as conn:
            reap_dead_runs(conn)
            df = load_runs(
                conn,
                name_like=name_like,
                status=status,
                schedule_name=schedule_name,
                model=model,
                labels=want or None,
                launched_by=launched_by,
                preset=preset,
                tag=tag,
                limit=limit,
            )
    except (StoreError, psycopg.Error) as e:
        fail(str(e))
    if as_json or fmt == "json":
        for _, r in df.iterrows():
            row = {
                "run_id": r["run_id"],
                "name": r["name"],
                "target": r["target_url"],
                "model": r["model"],
                "labels": r["labels"],
                "launched_by": r["launched_by"],
                "tags": list(r["tags"]),
                "status": r["status"],
                "valid": None if pd.isna(r["valid"]) else bool(r["valid"]),
                "started_at": None if pd.isna(r["started_at"]) else r["started_at"].isoformat(),
                "duration_s": None if pd.isna(r["duration_s"]) else float(r["duration_s"]),
                "requests": int(r["requests"]),
                "errors": int(r["errors"]),
            }
            sys.stdout.write(json.dumps(row) + "\n")
        return
    columns = (
        "id",
        "name",
        "target",
        "model",
        "labels",
        "by",
        "tags",
        "started (UTC)",
        "duration",
        "status",
        "validity",
        "requests",
        "errors",
    )
    rows: list[list[str]] = []
    for _, r in df.iterrows():
        started = "" if pd.isna(r["started_at"]) else r["started_at"].strftime("%Y-%m-%d %H:%M:%S")
        dur = "" if pd.isna(r["duration_s"]) else f"{r['duration_s']:.0f} s"
        rows.append(
            [
                r["run_id"] if fmt == "plain" else r["run_id"][:8],
                str(r["name"]),
                str(r["target_url"]),
                str(r["model"]),
                _labels_text(r["labels"]),
                str(r["launched_by"] or ""),
                ",".join(r["tags"]),
                started,
                dur,
                str(r["status"]),
                _validity(r["valid"]),
                str(r["requests"]),
                str(r["errors"]),
            ]
        )
    if fmt == "plain":
        write_plain(columns, rows)
        return
    t = Table(title=f"{len(df)} run(s)")
    for col in columns:
        t.add_column(col, justify="right" if col in ("duration", "requests", "errors") else "left")
    for cells in rows:
        t.add_row(*cells)
    stdout_console().print(t)
