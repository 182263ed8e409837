"""`peakload export RUN --format csv|parquet|jsonl|otlp --out FILE`: csv, parquet and jsonl give
one row per request with its timestamps and chunk offsets (prompt/response text only with
--include-content); otlp gives the run's metrics as OTLP JSON (analysis.reports.otlp), the form
an OpenTelemetry Collector's file receiver reads."""

from __future__ import annotations

from typing import cast

import click
import psycopg

from analysis.reports.export import FORMATS, Format, export_run
from loadgen.errors import StoreError
from ui.commands.store_refs import analysis_store, fail, resolve_or_fail
from ui.options import OutputFile


@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice((*FORMATS, "otlp")), required=True)
@click.option("--out", "out", type=OutputFile(), required=True)
@click.option(
    "--include-content",
    is_flag=True,
    help="include prompt and response text (only stored if the run opted in; not for otlp)",
)
def export_command(run: str, fmt: str, out: str, include_content: bool) -> None:
    """Export RUN's requests (id, id prefix or name) to FILE, or its metrics (otlp)."""
    try:
        with analysis_store() as conn:
            run_id = resolve_or_fail(conn, run)
            if fmt == "otlp":
                from analysis.reports.otlp import run_otlp, write_otlp

                payload, n = run_otlp(conn, run_id)
                write_otlp(payload, out)
                click.echo(f"wrote the metrics of {n} requests of run {run_id} to {out} (otlp)")
                return
            n = export_run(conn, run_id, out, cast(Format, fmt), include_content=include_content)
    except (StoreError, psycopg.Error, OSError) as e:
        fail(str(e))
    click.echo(f"wrote {n} requests of run {run_id} to {out} ({fmt})")
