"""`peakload export RUN --format csv|parquet|jsonl --out FILE`: one row per request with its
timestamps and chunk offsets. Prompt/response text only with --include-content."""

from __future__ import annotations

from typing import cast

import click
import psycopg

from analysis.reports.export import FORMATS, Format, export_run
from loadgen.errors import StoreError
from ui.commands.runs import analysis_store, fail, resolve_or_fail


@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True)
@click.option("--out", "out", type=click.Path(dir_okay=False, writable=True), required=True)
@click.option(
    "--include-content",
    is_flag=True,
    help="include prompt and response text (only stored if the run opted in)",
)
def export_command(run: str, fmt: str, out: str, include_content: bool) -> None:
    """Export RUN's requests (id, id prefix or name) to FILE."""
    try:
        with analysis_store() as conn:
            run_id = resolve_or_fail(conn, run)
            n = export_run(conn, run_id, out, cast(Format, fmt), include_content=include_content)
    except (StoreError, psycopg.Error, OSError) as e:
        fail(str(e))
    click.echo(f"wrote {n} requests of run {run_id} to {out} ({fmt})")
