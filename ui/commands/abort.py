"""`peakload abort RUN [--reason TEXT]`: stop a distributed run everywhere within seconds. The
flag is set in PostgreSQL (workers poll it); what was measured is kept; the run ends `aborted`."""

from __future__ import annotations

import sys

import click

from loadgen.errors import PeakloadError


@click.command("abort")
@click.argument("run_id", metavar="RUN")
@click.option("--reason", default="aborted by the operator", show_default=True)
def abort_command(run_id: str, reason: str) -> None:
    """Abort RUN (its id, as printed by `peakload submit`)."""
    import uuid

    from workers.app import redis_url
    from workers.coordinator import abort_run
    from workers.store.connect import connect_store

    try:
        uuid.UUID(run_id)
    except ValueError:
        raise click.BadParameter(f"not a run id: {run_id!r}", param_hint="RUN") from None
    try:
        with connect_store(autocommit=True) as conn:
            ok = abort_run(conn, run_id, reason, redis_url())
            row = conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    except PeakloadError as exc:
        click.echo(f"peakload abort: {exc}", err=True)
        sys.exit(1)
    if row is None:
        click.echo(f"peakload abort: no run {run_id}", err=True)
        sys.exit(1)
    if not ok:
        click.echo(f"run {run_id} has already ended ({row[0]}); nothing to abort")
        return
    click.echo(f"run {run_id}: abort requested; workers stop within a few seconds")
