"""`peakload compare BASELINE CANDIDATE`: per latency metric, level and percentile, the change
with a bootstrap CI of the difference and a Mann-Whitney U test (analysis.compare).
Exit codes: 0 no significant regression beyond the threshold; 1 at least one; 3 bad input or
store error."""

from __future__ import annotations

import json
import sys

import click
import psycopg
from rich.console import Console
from rich.table import Table

from analysis.compare import COMPARE_METRICS, compare_runs, label_differences
from analysis.load import load_requests, load_run
from loadgen.errors import StoreError
from ui.commands.runs import analysis_store, fail, resolve_or_fail

EXIT_REGRESSION, EXIT_BAD_INPUT = 1, 3


def _f(x: object, fmt: str = "{:,.2f}") -> str:
    return "—" if x is None or x != x else fmt.format(x)


@click.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice(COMPARE_METRICS),
    help="metrics to compare (repeatable; default all four)",
)
@click.option(
    "--percentile",
    "percentiles",
    multiple=True,
    type=click.FloatRange(0, 100),
    help="percentiles (repeatable; default 50, 90, 99)",
)
@click.option(
    "--threshold-pct",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0),
    help="a regression must exceed this relative change",
)
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=click.FloatRange(0.5, 1, min_open=True, max_open=True),
)
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON")
def compare_command(
    baseline: str,
    candidate: str,
    metrics: tuple[str, ...],
    percentiles: tuple[float, ...],
    threshold_pct: float,
    confidence: float,
    as_json: bool,
) -> None:
    """Compare CANDIDATE against BASELINE (ids, id prefixes or names)."""
    try:
        with analysis_store() as conn:
            b_id = resolve_or_fail(conn, baseline, EXIT_BAD_INPUT)
            c_id = resolve_or_fail(conn, candidate, EXIT_BAD_INPUT)
            b_run, c_run = load_run(conn, b_id), load_run(conn, c_id)
            b_df, c_df = load_requests(conn, b_id), load_requests(conn, c_id)
    except (StoreError, psycopg.Error) as e:
        fail(str(e), EXIT_BAD_INPUT)
    table = compare_runs(
        b_df,
        c_df,
        metrics=metrics or COMPARE_METRICS,
        percentiles=percentiles or (50.0, 90.0, 99.0),
        threshold_pct=threshold_pct,
        confidence=confidence,
    )
    diffs = label_differences(b_run, c_run)
    regressed = bool(table["regression"].any()) if len(table) else False
    if as_json:
        out = {
            "baseline": b_id,
            "candidate": c_id,
            "threshold_pct": threshold_pct,
            "confidence": confidence,
            "label_differences": diffs,
            "regression": regressed,
            "rows": json.loads(table.to_json(orient="records")),
        }
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        sys.exit(EXIT_REGRESSION if regressed else 0)
    console = Console()
    for key, (bv, cv) in diffs.items():
        console.print(f"[yellow]note:[/] {key} differs: baseline {bv!r}, candidate {cv!r}")
    t = Table(
        title=f"{c_id[:8]} vs baseline {b_id[:8]} (threshold {threshold_pct:g}%, "
        f"{confidence:.0%} CI)"
    )
    for col in (
        "metric",
        "level",
        "pct",
        "baseline ms",
        "candidate ms",
        "change",
        "CI of diff",
        "MWU p",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    for _, r in table.iterrows():
        verdict = (
            "[bold red]REGRESSION[/]"
            if r["regression"]
            else "[green]improved[/]"
            if r["improvement"]
            else "ok"
        )
        t.add_row(
            r["metric"],
            str(r["level"]),
            f"p{r['percentile']:g}",
            _f(r["baseline"]),
            _f(r["candidate"]),
            _f(r["delta_pct"], "{:+.1f}%"),
            f"[{_f(r['ci_lower'])}, {_f(r['ci_upper'])}]",
            _f(r["mwu_p"], "{:.2g}"),
            verdict,
        )
    console.print(t)
    if regressed:
        console.print("[bold red]regression beyond the threshold, statistically significant")
    sys.exit(EXIT_REGRESSION if regressed else 0)
