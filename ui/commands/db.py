"""`peakload db migrate | status | replay | stop`: the store's schema, what its server offers,
spooled batches left behind, and stopping the embedded server (left running between commands).
"""

from __future__ import annotations

import json
import os
import sys

import click

from loadgen.errors import StoreError
from workers.store import connect, embedded
from workers.store.features import StoreFeatures
from workers.store.writer import replay_spools, spool_root


@click.group()
def db() -> None:
    """The store: PEAKLOAD_DATABASE_URL, or the embedded PostgreSQL under the data directory."""


@db.command()
def migrate() -> None:
    """Apply pending migrations and switch on what the server's license allows."""
    try:
        url = connect.database_url()
        found = connect.ensure_schema(url, force=True)
        status = connect.store_status(url)
    except StoreError as e:
        raise click.ClickException(str(e)) from e
    assert found is not None
    click.echo(f"store: {connect.redact_url(url)}")
    click.echo(f"migrations applied: {', '.join(_names(status))}")
    _echo_features(status)


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status(as_json: bool) -> None:
    """Server version, migrations, TimescaleDB and its license, and each optional feature."""
    try:
        url = connect.database_url()
        found = connect.store_status(url)
    except StoreError as e:
        raise click.ClickException(str(e)) from e
    if as_json:
        data = {"url": connect.redact_url(url), **found.to_json()}
        json.dump(data, sys.stdout, indent=2, default=str)
        click.echo()
        return
    click.echo(f"store:       {connect.redact_url(url)}")
    click.echo(f"server:      PostgreSQL {found.server_version}")
    click.echo(f"migrations:  {', '.join(_names(found)) or 'none'}")
    if found.pending_migrations:
        click.echo(
            f"pending:     {', '.join(found.pending_migrations)} (run `peakload db migrate`)"
        )
    _echo_features(found)


@db.command()
def stop() -> None:
    """Stop the embedded PostgreSQL server (a no-op with PEAKLOAD_DATABASE_URL set)."""
    if os.environ.get(connect.DATABASE_ENV):
        click.echo(f"{connect.DATABASE_ENV} is set: there is no embedded server to stop")
        return
    try:
        stopped = embedded.stop()
    except StoreError as e:
        raise click.ClickException(str(e)) from e
    where = embedded.default_datadir()
    click.echo(f"stopped the embedded server at {where}" if stopped else f"not running ({where})")


@db.command()
def replay() -> None:
    """Replay batches a writer left spooled (the store was unreachable when its run ended)."""
    try:
        url = connect.database_url()
        connect.ensure_schema(url)
        done = replay_spools(url)
    except StoreError as e:
        raise click.ClickException(str(e)) from e
    if not done:
        click.echo(f"nothing spooled under {spool_root()}")
    for run_id, batches in done.items():
        click.echo(f"run {run_id}: {batches} spooled batches replayed")


def _names(found: StoreFeatures) -> list[str]:
    return [f"{m['version']:04d}_{m['name']}" for m in found.migrations]


def _echo_features(found: StoreFeatures) -> None:
    for name, feature in found.features.items():
        click.echo(f"{name + ':':<23}{'on ' if feature.on else 'off'}  {feature.reason}")
