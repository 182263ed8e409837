"""`peakload report RUN [--html FILE] [--json FILE] [--png-dir DIR] [--claims FILE]`: the summary
table, and optionally a self-contained HTML report, its numbers as JSON, and PNG figures.
Exit codes (analysis.verdicts.exitcodes): 0 written; with --claims exactly as `peakload sla` (1 a
claim or the error budget fails, 3 undecidable or empty, 4 invalid, 5 partial); 2 bad input, store
or write error; 6 no such run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import psycopg
from rich.table import Table

from analysis.verdicts.exitcodes import Exit
from loadgen.errors import SpecError, StoreError
from ui.commands.store_refs import analysis_store, fail, resolve_or_fail
from ui.options import Number, OutputFile, OutputFolder
from ui.output import stdout_console


def no_requests_sentence(report: dict[str, Any]) -> str:
    """What a run with no stored request says instead of an empty table."""
    s = report["summary"]
    why = "; ".join(str(r) for r in s.get("invalid_reasons") or [])
    return (
        f"run {s['run_id']} ({s.get('name')}) has no requests: nothing was measured, so there "
        f"are no latencies or rates to report. It ended {s.get('status')}"
        + (f": {why}" if why else ".")
    )


@click.command("report")
@click.argument("run")
@click.option("--html", "html_out", type=OutputFile(), help="write the HTML report")
@click.option("--json", "json_out", type=OutputFile(), help="write every number")
@click.option("--png-dir", type=OutputFolder(), help="write PNG figures here")
@click.option(
    "--claims",
    "claims_path",
    type=click.Path(dir_okay=False),
    help="SLA claims TOML to judge in the report",
)
@click.option(
    "--metric",
    default="ttft_ms",
    show_default=True,
    type=click.Choice(["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"]),
    help="latency metric of the frontier",
)
@click.option(
    "--percentile",
    default=99.0,
    show_default=True,
    type=Number(0, 100, max_open=True),
    help="frontier percentile",
)
def report_command(
    run: str,
    html_out: str | None,
    json_out: str | None,
    png_dir: str | None,
    claims_path: str | None,
    metric: str,
    percentile: float,
) -> None:
    """Report on RUN (id, id prefix or name)."""
    try:
        claims = None
        if claims_path:
            from analysis.verdicts import sla

            claims = sla.load_claims(claims_path)
        with analysis_store() as conn:
            run_id = resolve_or_fail(conn, run)
            # the analysis (pandas, scipy) loads only for a run that exists
            from analysis.reports.report import build_report

            report = build_report(
                conn, run_id, claims=claims, frontier_metric=metric, frontier_percentile=percentile
            )
    except (SpecError, StoreError, psycopg.Error) as e:
        fail(str(e))
    print_report(report, claims is not None)
    write_outputs(report, json_out, html_out, png_dir)
    sys.exit(report["sla_exit_code"] if claims is not None else Exit.PASSED)


def print_report(report: dict[str, Any], judged: bool) -> None:
    """The report's tables on stdout: the summary, audio, client vs server, adapters, prefix
    cache, where the time went, cost, the probe, and with claims the SLA verdicts."""
    from analysis.reports.summary_audio import render_audio_table
    from analysis.reports.summary_table import (
        render_client_vs_server_table,
        render_summary_table,
    )
    from analysis.reports.workload_table import (
        render_adapter_table,
        render_prefix_table,
        server_counter_lines,
    )
    from analysis.store.imports import import_lines
    from analysis.store.probe import probe_rows
    from ui.results import cost_line, print_verdict

    console = stdout_console()
    if report.get("imported"):
        for line in import_lines(report["imported"]):
            console.print(line, markup=False, highlight=False)
    if report["run"].get("requests"):
        console.print(render_summary_table(report["summary"]))
        if (audio := render_audio_table(report["summary"])) is not None:
            console.print(audio)
        if (server := render_client_vs_server_table(report["summary"])) is not None:
            console.print(server)
        for table in (
            render_adapter_table(report["summary"]),
            render_prefix_table(report["summary"]),
        ):
            if table is not None:
                console.print(table)
        for line in server_counter_lines(report.get("prefix_cache_server") or {}):
            console.print(line)
    else:
        console.print(no_requests_sentence(report))
    diag = report["server"]["diagnosis"]
    if diag["verdict"] != "unknown":
        console.print(f"[bold]where the time went[/]: {diag['sentence']}")
    if report["cost"]["basis"]:
        console.print(f"[bold]cost[/]: {cost_line(report['cost'])}")
    if report.get("probe"):
        table = Table(title=f"parameter probe ({report['probe'].get('probed_at', '')})")
        for col in ("parameter", "verdict", "detail"):
            table.add_column(col, overflow="fold")
        for row in probe_rows(report["probe"]):
            table.add_row(*(str(c) for c in row))
        console.print(table)
    if judged:
        print_verdict(
            {
                "verdict": {
                    "exit_code": report["sla_exit_code"],
                    "verdict": Exit(report["sla_exit_code"]).name.lower(),
                    "reason": report["sla_reason"],
                    "level": None,
                    "criteria": report["sla"],
                }
            },
            console,
            title="SLA verdicts",
        )


def write_outputs(
    report: dict[str, Any], json_out: str | None, html_out: str | None, png_dir: str | None
) -> None:
    """--json, --html and --png-dir, each announced on stdout; a write error is one line."""
    console = stdout_console()
    try:
        if json_out:
            Path(json_out).write_text(json.dumps(report, indent=1), encoding="utf-8")
            console.print(f"JSON: {json_out}")
        if html_out:
            from analysis.reports import render  # plotly: only for --html

            Path(html_out).write_text(render.render_html(report), encoding="utf-8")
            console.print(f"HTML: {html_out}")
        if png_dir:
            from analysis.reports import figures  # matplotlib: only for --png-dir

            paths = figures.write_pngs(report, png_dir)
            console.print(f"PNG: {len(paths)} figures in {png_dir}")
    except OSError as e:
        fail(f"cannot write the report: {e}")
