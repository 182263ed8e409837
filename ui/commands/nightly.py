"""`peakload nightly SCHEDULE`: one metric's percentile across the runs of a schedule, the change
points in that history and a verdict for cron jobs and CI (all analysis.verdicts.nightly's; this
command presents them), decided by the latest change point larger than the threshold (a smaller,
later one must not hide a regression), after the newest run's own state. Exit codes
(analysis.verdicts.exitcodes): 0 that change is no regression (or there is none); 1 it is a
regression; 3 too few usable runs, or the newest run has no value; 4 the newest run is invalid; 5 it
is partial or not ended; 2 bad input or store error; 6 no runs of that schedule."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import click
import pandas as pd
import psycopg
from rich.table import Table

from analysis.verdicts import nightly
from analysis.verdicts.exitcodes import Exit
from loadgen.errors import StoreError
from ui.commands.store_refs import analysis_store, fail
from ui.options import Number, OutputFile
from ui.output import stdout_console

EXIT_BAD_INPUT = Exit.BAD_INPUT
_pct = nightly.pct_text
DEFAULT_LAST = 60  # runs: two months of nightlies
SINCE_FORMATS = ["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]


@click.command("nightly")
@click.argument("schedule")
@click.option(
    "--metric",
    default="ttft_ms",
    show_default=True,
    type=click.Choice(nightly.METRICS),
    help="per-request metric; output_speed_tps is tokens/s (a fall is the regression); "
    "error_rate is each run's share of failed steady requests (no percentile)",
)
@click.option(
    "--percentile",
    default=99.0,
    show_default=True,
    type=Number(0, 100),
    help="percentile of the metric over each run's ok steady requests",
)
@click.option("--level", type=click.IntRange(0), help="one load level (default: all, pooled)")
@click.option(
    "--last",
    default=DEFAULT_LAST,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="the newest N runs of the schedule",
)
@click.option(
    "--since",
    type=click.DateTime(SINCE_FORMATS),
    help="only runs created at or after this time (UTC), e.g. 2026-10-01",
)
@click.option(
    "--threshold-pct",
    "--threshold",
    "threshold_pct",
    default=nightly.DEFAULT_THRESHOLD_PCT,
    show_default=True,
    type=Number(0),
    help="changes up to this size (percent of the level before) do not decide the verdict",
)
@click.option(
    "--include-invalid",
    is_flag=True,
    help="let invalid and unended runs take part in the detection (shown either way)",
)
@click.option("--json", "json_out", type=OutputFile(), help="write every number")
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="PostgreSQL URL of the store (default: PEAKLOAD_DATABASE_URL, else the embedded one)",
)
def nightly_command(
    schedule: str,
    metric: str,
    percentile: float,
    level: int | None,
    last: int,
    since: dt.datetime | None,
    threshold_pct: float,
    include_invalid: bool,
    json_out: str | None,
    store_url: str | None,
) -> None:
    """The history of one metric across the runs of SCHEDULE, with change points.

    Each run's value pools its ok steady requests. Change points come from binary segmentation
    on the mean (BIC penalty); a new level is found once it has lasted 3 runs, so the detection
    needs at least 6 usable runs. Invalid runs (a saturated generator) and runs not yet ended are
    shown but left out of the detection unless --include-invalid.

    The verdict comes from the latest change point larger than --threshold-pct; smaller ones
    are listed but do not decide (a later small shift cannot hide a regression before it).

    \b
    Exit codes:
      0  that change point is an improvement, or there is none
      1  it is a regression: a latency or error rate that rose, or an output speed that fell
      3  too few usable runs to decide, or the newest run has no value
      4  the newest run is invalid (unless --include-invalid)
      5  the newest run is partial, aborted or not ended (unless --include-invalid)
      2  bad input (unknown level, bad option) or store error; nothing written
      6  no runs of SCHEDULE in the store
    """
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=dt.UTC)
    try:
        with analysis_store(store_url) as conn:
            known = nightly.schedule_names(conn)
            if schedule not in known:
                fail(_unknown_schedule(schedule, known), Exit.MISSING)
            hist, result = nightly.judge_schedule(
                conn,
                schedule,
                threshold_pct=threshold_pct,
                include_invalid=include_invalid,
                metric=metric,
                percentile=percentile,
                level=level,
                limit=last,
                since=since,
            )
    except (StoreError, psycopg.Error) as e:
        fail(" ".join(str(e).split()), EXIT_BAD_INPUT)
    if level is not None and len(hist) and not (hist["n"] > 0).any():
        fail(
            f"level {level}: no run of schedule {schedule!r} has ok steady requests at it",
            EXIT_BAD_INPUT,
        )
    if json_out:
        out = {
            "schedule": schedule,
            "metric": metric,
            "unit": nightly.UNITS[metric],
            "higher_is_better": metric in nightly.HIGHER_IS_BETTER,
            "percentile": percentile,
            "level": level,
            "last": last,
            "since": None if since is None else since.isoformat(),
            "threshold_pct": threshold_pct,
            "invalid_runs_in_detection": include_invalid,
            "min_runs": nightly.MIN_RUNS,
            **result,
        }
        try:
            Path(json_out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        except OSError as e:
            fail(f"cannot write {json_out}: {e}", EXIT_BAD_INPUT)
    console = stdout_console()
    console.print(_table(hist, result, schedule, metric, percentile, level))
    for line in _notes(result, metric, threshold_pct, include_invalid):
        console.print(line)
    fam = result.get("family") or {}
    if fam:
        console.print(
            f"family: {fam['family']} ({fam['family_size']} split positions), "
            f"{fam['correction']}, family-wise error rate {fam['familywise_error_rate']:.0%}; "
            "run-to-run variation counted (the series is of per-run values)"
        )
    sys.exit(result["exit_code"])


def _unknown_schedule(schedule: str, known: list[str]) -> str:
    if not known:
        return f"no runs of schedule {schedule!r}: the store has no scheduled runs yet"
    shown = ", ".join(known[:10]) + (f" (and {len(known) - 10} more)" if len(known) > 10 else "")
    return f"no runs of schedule {schedule!r} in the store; schedules with runs: {shown}"


def _table(
    hist: pd.DataFrame,
    result: dict[str, Any],
    schedule: str,
    metric: str,
    percentile: float,
    level: int | None,
) -> Table:
    unit = nightly.UNITS[metric]
    where = "all levels pooled" if level is None else f"level {level}"
    t = Table(title=f"{schedule}: p{percentile:g} {metric} per run ({unit}, {where})")
    for col in ("run", "name", "started (UTC)", "status", "validity", "n", f"p{percentile:g}"):
        t.add_column(col, justify="right" if col in ("n", f"p{percentile:g}") else "left")
    t.add_column("segment", justify="right")
    t.add_column("change point / detection")
    points = {p["index"]: p for p in result["change_points"]}
    for i, r in enumerate(result["runs"]):
        started = r["started_at"] or r["created_at"]
        when = pd.Timestamp(started).strftime("%Y-%m-%d %H:%M") if started else "—"
        validity = "?" if r["valid"] is None else "valid" if r["valid"] else "[yellow]INVALID[/]"
        if i in points:
            p = points[i]
            style = "bold red" if p["regression"] else "red" if p["worse"] else "green"
            note = (
                f"[{style}]◆ {p['direction']} {_pct(p['delta_pct'])}, "
                f"{'worse' if p['worse'] else 'better'}[/]"
            )
        elif r["excluded"]:
            note = f"[dim]excluded: {r['excluded']}[/]"
        else:
            note = ""
        t.add_row(
            r["run_id"][:8],
            str(r["name"]),
            when,
            str(r["status"]),
            validity,
            str(r["n"]),
            "—" if r["value"] is None else f"{r['value']:,.2f}",
            "" if r["segment"] is None else str(r["segment"]),
            note,
        )
    return t


def _notes(
    result: dict[str, Any], metric: str, threshold_pct: float, include_invalid: bool
) -> list[str]:
    """The lines under the table: how runs were chosen for the detection, each change point,
    and the verdict."""
    unit = nightly.UNITS[metric]
    runs = result["runs"]
    lines = []
    excluded = [r for r in runs if r["excluded"]]
    invalid_shown = sum(1 for r in runs if r["valid"] is False)
    if include_invalid:
        lines.append(
            f"Invalid runs are included in the change-point detection ({invalid_shown} shown)."
        )
    else:
        lines.append(
            f"Invalid and unended runs are shown but excluded from the change-point detection "
            f"({invalid_shown} invalid shown; --include-invalid to use them)."
        )
    if excluded:
        reasons: dict[str, int] = {}
        for r in excluded:
            reasons[r["excluded"]] = reasons.get(r["excluded"], 0) + 1
        text = ", ".join(f"{n} {why}" for why, n in reasons.items())
        lines.append(f"{len(excluded)} of {len(runs)} runs left out: {text}.")
    points = result["change_points"]
    lines.append(
        f"Change points in {result['runs_used']} usable runs (binary segmentation on the mean, "
        f"BIC penalty, >= {nightly.MIN_SEGMENT} runs per segment): {len(points)}"
    )
    for p in points:
        r = runs[p["index"]]
        when = (r["started_at"] or r["created_at"] or "")[:10]
        lines.append(
            f"  from run {p['run_id'][:8]} ({when}): {p['before']:,.2f} -> {p['after']:,.2f} "
            f"{unit}, {p['direction']} {abs(p['delta']):,.2f} "
            f"({_pct(p['delta_pct'])}), "
            f"{'worse' if p['worse'] else 'better'}"
        )
    code = result.get("detection_exit_code", result["exit_code"])
    style = {Exit.UNDECIDABLE: "yellow", Exit.FAILED: "bold red"}.get(code, "green")
    lines.append(f"[{style}]{nightly.verdict_reason(result, metric, threshold_pct)}[/]")
    if result.get("newest_run_problem"):
        lines.append(
            f"[bold yellow]But {result['newest_run_problem']}: exit {result['exit_code']} "
            "(--include-invalid to judge the history alone).[/]"
        )
    return lines
