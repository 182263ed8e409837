"""`peakload abort RUN [--reason TEXT]`: stop a run within seconds. The flag is set in
PostgreSQL: distributed workers poll it, and a local run's process hears it through its lease
(workers.local_lease); what was measured is kept; the run ends `aborted`. A local run whose
process is gone is marked `failed` instead, and the command says there was nothing to stop.
Exit codes (analysis.verdicts.exitcodes): 0 abort requested or nothing left to stop; 2 not a run
id, or the store (or broker) unreachable; 6 no such run."""

from __future__ import annotations

import sys

import click
import psycopg

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import PeakloadError


@click.command("abort")
@click.argument("run_id", metavar="RUN")
@click.option("--reason", default="aborted by the operator", show_default=True)
def abort_command(run_id: str, reason: str) -> None:
    """Abort RUN (its id, as printed by `peakload run` or `peakload submit`)."""
    import uuid

    from workers.app import redis_url
    from workers.coordinator import abort_run
    from workers.local_lease import HEARTBEAT_S, reap_dead_local_runs
    from workers.runctl import request_abort
    from workers.store.connect import connect_store

    try:
        uuid.UUID(run_id)
    except ValueError:
        raise click.BadParameter(f"not a run id: {run_id!r}", param_hint="RUN") from None
    try:
        with connect_store(autocommit=True) as conn:
            dead = dict(reap_dead_local_runs(conn))
            found = conn.execute(
                "SELECT mode, owner FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            if found is not None and found[0] == "local":
                ok = request_abort(conn, run_id, reason)
            else:
                ok = abort_run(conn, run_id, reason, redis_url())
            row = conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    except (PeakloadError, psycopg.Error) as exc:
        click.echo(f"peakload abort: {' '.join(str(exc).split())}", err=True)
        sys.exit(Exit.BAD_INPUT)
    if row is None or found is None:
        click.echo(f"peakload abort: no run {run_id}", err=True)
        sys.exit(Exit.MISSING)
    if run_id in dead:
        click.echo(f"run {run_id} was not running: {dead[run_id]}; marked failed, nothing to stop")
        return
    if not ok:
        click.echo(f"run {run_id} has already ended ({row[0]}); nothing to abort")
        return
    if found[0] == "local":
        click.echo(
            f"run {run_id}: abort requested; the local run's process ({found[1]}) stops within "
            f"{HEARTBEAT_S * 2:g} s"
        )
        return
    click.echo(f"run {run_id}: abort requested; workers stop within a few seconds")
