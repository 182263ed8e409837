"""`peakload compare BASELINE CANDIDATE`: whether the candidate regressed
(analysis.verdicts.regression): levels paired by configured load; per pair the error rate (Fisher's
exact test), throughput and every latency metric at each percentile (bootstrap CI of the difference,
Mann-Whitney U). Exit codes (analysis.verdicts.exitcodes): 0 no significant regression; 1 at least
one; 7 cannot compare (a side invalid, partial or empty, or no load in common); 2 bad input or store
error; 6 no such run."""

from __future__ import annotations

import json
import math
import sys

import click
import pandas as pd
import psycopg
from rich.table import Table

from analysis.stats.cost import cost_change
from analysis.stats.regions import compare_regions, region_breakdown, shard_probes
from analysis.store.load import load_levels, load_requests, load_run
from analysis.verdicts.compare import label_differences
from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.regression import LATENCY_METRICS, compare_stored
from loadgen.errors import StoreError
from ui.commands.runs import analysis_store, fail, resolve_or_fail
from ui.output import stdout_console


def _f(x: object, fmt: str = "{:,.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)) or x is pd.NA:
        return "—"
    return fmt.format(x)


@click.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice(LATENCY_METRICS),
    help="latency metrics to compare (repeatable; default all); error rate and throughput "
    "are always judged",
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
    help="a latency or throughput regression must exceed this relative change",
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
            b_id = resolve_or_fail(conn, baseline)
            c_id = resolve_or_fail(conn, candidate)
            b_run, c_run = load_run(conn, b_id), load_run(conn, c_id)
            b_df, c_df = load_requests(conn, b_id), load_requests(conn, c_id)
            b_lv, c_lv = load_levels(conn, b_id), load_levels(conn, c_id)
            b_sh, c_sh = shard_probes(conn, b_id), shard_probes(conn, c_id)
    except (StoreError, psycopg.Error) as e:
        fail(str(e), Exit.BAD_INPUT)
    result = compare_stored(
        b_run,
        c_run,
        b_df,
        c_df,
        b_lv,
        c_lv,
        metrics=metrics or LATENCY_METRICS,
        percentiles=percentiles or (50.0, 90.0, 99.0),
        threshold_pct=threshold_pct,
        confidence=confidence,
    )
    diffs = label_differences(b_run, c_run)
    cost = cost_change(b_run, c_run, b_df, c_df, b_lv, c_lv)
    regions = compare_regions(region_breakdown(b_df, b_sh), region_breakdown(c_df, c_sh))
    if as_json:
        out = {
            "baseline": b_id,
            "candidate": c_id,
            "threshold_pct": threshold_pct,
            "confidence": confidence,
            "label_differences": diffs,
            "exit_code": int(result.code),
            "verdict": result.code.name.lower(),
            "reason": result.reason,
            "notes": result.notes,
            "regression": result.code is Exit.FAILED,
            "rows": json.loads(result.rows.to_json(orient="records")) if len(result.rows) else [],
            "cost": json.loads(json.dumps(cost, default=str)),
            "regions": regions,
        }
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        sys.exit(result.code)
    console = stdout_console()
    # labels first: runs that differ in them measure different things
    for key, (bv, cv) in diffs.items():
        console.print(f"[yellow]note:[/] {key} differs: baseline {bv!r}, candidate {cv!r}")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    if len(result.rows):
        console.print(_table(result.rows, b_id, c_id, threshold_pct, confidence))
    if cost["baseline"]["basis"] or cost["candidate"]["basis"]:
        console.print(_cost_table(cost))
    if regions:
        console.print(_regions_table(regions))
    style = {Exit.PASSED: "green", Exit.FAILED: "bold red"}.get(result.code, "bold yellow")
    console.print(f"[{style}]{result.reason}[/] (exit {int(result.code)})")
    sys.exit(result.code)


def _table(rows: pd.DataFrame, b_id: str, c_id: str, threshold_pct: float, conf: float) -> Table:
    t = Table(title=f"{c_id[:8]} vs baseline {b_id[:8]} (threshold {threshold_pct:g}%, {conf:.0%})")
    for col in (
        "metric",
        "load",
        "pct",
        "baseline",
        "candidate",
        "change",
        "CI of diff",
        "p",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("metric", "load", "verdict") else "right")
    for _, r in rows.iterrows():
        verdict = (
            "[bold red]REGRESSION[/]"
            if r["regression"]
            else "[green]improved[/]"
            if r["improvement"]
            else "ok"
        )
        pct = r["percentile"]
        is_rate = r["metric"] == "error_rate"
        value_fmt = "{:.2%}" if is_rate else "{:,.2f}"
        change = (
            _f(r["delta"] * 100, "{:+.2f} pts")
            if is_rate and r["delta"] is not None
            else _f(r["delta_pct"], "{:+.1f}%")
        )
        ci = (
            ""
            if r["ci_lower"] is None or r["ci_lower"] != r["ci_lower"]
            else f"[{_f(r['ci_lower'])}, {_f(r['ci_upper'])}]"
        )
        t.add_row(
            str(r["metric"]),
            str(r["load"]),
            "" if pct is None or pct != pct else f"p{pct:g}",
            _f(r["baseline"], value_fmt),
            _f(r["candidate"], value_fmt),
            change,
            ci,
            _f(r["p_value"], "{:.2g}"),
            verdict,
        )
    return t


def _cost_table(cost: dict[str, object]) -> Table:
    """Cost per million output tokens per load at each side's measured throughput (no
    verdict: prices and hardware are inputs, not measurements)."""
    b, c = cost["baseline"], cost["candidate"]
    assert isinstance(b, dict) and isinstance(c, dict)
    t = Table(
        title=f"Cost: baseline {b['basis'] or 'no price'} {_f(b['total_usd'], '${:,.4f}')}, "
        f"candidate {c['basis'] or 'no price'} {_f(c['total_usd'], '${:,.4f}')}"
    )
    for col in ("load", "baseline $/M out", "candidate $/M out", "change"):
        t.add_column(col, justify="left" if col == "load" else "right")
    levels = cost["levels"]
    assert isinstance(levels, list)
    for r in levels:
        t.add_row(
            str(r["load"]),
            _f(r["baseline_usd_per_mtok_output"], "${:,.3f}"),
            _f(r["candidate_usd_per_mtok_output"], "${:,.3f}"),
            _f(r["change_pct"], "{:+.1f}%"),
        )
    return t


def _regions_table(rows: list[dict[str, object]]) -> Table:
    """Network round trip, connection set-up and server time per region, both runs (ms)."""
    t = Table(title="Network and server time per region (ms)")
    for col in ("region", "metric", "baseline", "candidate", "change"):
        t.add_column(col, justify="left" if col in ("region", "metric") else "right")
    for r in rows:
        t.add_row(
            str(r["region"]),
            str(r["metric"]),
            _f(r["baseline"]),
            _f(r["candidate"]),
            _f(r["change_pct"], "{:+.1f}%"),
        )
    return t
