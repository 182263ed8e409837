"""`peakload schedule add SPEC --cron EXPR [--name N] | list | remove NAME`: nightly runs. State in
PostgreSQL; fired by the beat (`peakload worker --beat`) and started by a control worker
(`peakload worker --control`). Cron is UTC; a missed slot is listed, never silently skipped.
Exit codes (analysis.verdicts.exitcodes): 0 done; 2 bad spec, cron or option, or the store
unreachable; 6 `remove`: no schedule of that name."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import psycopg
from rich.table import Table

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import PeakloadError
from ui.output import stdout_console


@click.group("schedule")
def schedule_group() -> None:
    """Runs on a cron schedule (UTC)."""


@schedule_group.command("add")
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@click.option("--cron", required=True, help='e.g. "0 2 * * *" (02:00 UTC every day)')
@click.option("--name", help="defaults to the spec's name")
def add(spec_path: str, cron: str, name: str | None) -> None:
    from loadgen.checks.specfile import load_spec
    from workers.schedules import add_schedule
    from workers.store.connect import connect_store

    try:
        spec = load_spec(spec_path)
        with connect_store(autocommit=True) as conn:
            add_schedule(conn, name or spec.name, cron, spec, str(Path(spec_path).resolve()))
    except (PeakloadError, psycopg.Error) as exc:
        click.echo(f"peakload schedule add: {exc}", err=True)
        sys.exit(Exit.BAD_INPUT)
    click.echo(f"schedule {name or spec.name!r} added: {cron} (UTC)")


@schedule_group.command("list")
def list_() -> None:
    from workers.schedules import list_schedules
    from workers.store.connect import connect_store

    try:
        with connect_store(autocommit=True) as conn:
            rows = list_schedules(conn)
    except (PeakloadError, psycopg.Error) as exc:
        click.echo(f"peakload schedule list: {exc}", err=True)
        sys.exit(Exit.BAD_INPUT)
    t = Table(title="schedules (UTC)")
    for col in ("name", "cron", "next", "last fired", "last run", "missed", "failed"):
        t.add_column(col)
    for r in rows:
        missed = str(r["missed"])
        if r["missed_recent"]:
            missed += " (latest " + ", ".join(s.isoformat() for s in r["missed_recent"][:3]) + ")"
        t.add_row(
            r["name"],
            r["cron"],
            r["next_slot"].isoformat(),
            r["last_fired"].isoformat() if r["last_fired"] else "-",
            r["last_run_status"] or "-",
            missed,
            str(r["failed"]),
        )
    stdout_console().print(t)


@schedule_group.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    from workers.schedules import remove_schedule
    from workers.store.connect import connect_store

    try:
        with connect_store(autocommit=True) as conn:
            removed = remove_schedule(conn, name)
    except (PeakloadError, psycopg.Error) as exc:
        click.echo(f"peakload schedule remove: {exc}", err=True)
        sys.exit(Exit.BAD_INPUT)
    if not removed:
        click.echo(f"peakload schedule remove: no schedule named {name!r}", err=True)
        sys.exit(Exit.MISSING)
    click.echo(f"schedule {name!r} removed")
