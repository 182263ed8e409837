"""The store connection and the run references the commands share: `analysis_store` (the URL
from workers.store), `resolve_or_fail` (analysis.store.refs: which run a reference means, or
exit MISSING), `fail` (one line, an exit code). Light on purpose: no pandas, so a command
given a reference that matches no run answers before it loads what it analyses with."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click
import psycopg

from analysis.store.refs import resolve_run_id
from analysis.verdicts.exitcodes import Exit


@contextmanager
def analysis_store(url: str | None = None) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the store at `url`, else the configured one
    (PEAKLOAD_DATABASE_URL or embedded)."""
    from workers.store.connect import connect_store

    conn = connect_store(url, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


def reap_dead_runs(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """Mark local runs whose process died `failed` (workers.local_lease), so no command shows
    a dead run as `running`."""
    from workers.local_lease import reap_dead_local_runs

    return reap_dead_local_runs(conn)


def resolve_or_fail(conn: psycopg.Connection[Any], ref: str) -> str:
    """The run `ref` names, or exit MISSING with the reason (which lists the candidates when
    the reference is ambiguous)."""
    reap_dead_runs(conn)
    try:
        return resolve_run_id(conn, ref)
    except LookupError as e:
        fail(str(e), Exit.MISSING)


def fail(message: str, exit_code: int = Exit.BAD_INPUT) -> NoReturn:
    """Print one error line to stderr and exit with `exit_code` (analysis.verdicts.exitcodes)."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(exit_code)
