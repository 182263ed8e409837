"""`peakload compare BASELINE CANDIDATE` (or `compare BASELINE... --candidate CANDIDATE`, or a
schedule's last K runs as the baseline): whether the candidate regressed
(analysis.verdicts.regression, analysis.verdicts.multirun): levels paired by configured load; per
pair the error rate, throughput and every latency metric at each percentile, one one-sided test
each, regressions decided by Holm over the whole family (analysis.verdicts.family). Exit codes
(analysis.verdicts.exitcodes): 0 no significant regression; 1 at least one; 7 cannot compare (a
side invalid, partial or empty, or no load in common); 2 bad input or store error; 6 no such run
(or schedule)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click
import pandas as pd
import psycopg
from rich.table import Table

from analysis.metrics.audio import has_audio
from analysis.reports.cost import cost_change
from analysis.stats.regions import compare_regions, region_breakdown, shard_probes
from analysis.store.load import load_levels, load_requests, load_run
from analysis.verdicts.compare import label_differences
from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.multirun import Side, compare_multi
from analysis.verdicts.regression import (
    AUDIO_METRICS,
    ERROR_METRIC,
    LATENCY_METRICS,
    THROUGHPUT_METRICS,
)
from loadgen.errors import StoreError
from ui.commands.store_refs import analysis_store, fail, resolve_or_fail
from ui.options import Number
from ui.output import stdout_console


def _f(x: object, fmt: str = "{:,.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)) or x is pd.NA:
        return "—"
    return fmt.format(x)


@click.command("compare")
@click.argument("runs", nargs=-1)
@click.option(
    "--candidate",
    help="the candidate run; every RUN is then a baseline run (several: run-to-run variation "
    "is counted)",
)
@click.option(
    "--baseline-schedule",
    metavar="SCHEDULE",
    help="add the newest --last runs of SCHEDULE (completed and valid, the candidate left out) "
    "to the baseline",
)
@click.option(
    "--last",
    default=5,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="with --baseline-schedule: how many of its runs",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    type=click.Choice((*LATENCY_METRICS, *AUDIO_METRICS)),
    help="latency metrics to compare (repeatable; default all); error rate and throughput "
    "are always judged",
)
@click.option(
    "--percentile",
    "percentiles",
    multiple=True,
    type=Number(0, 100),
    help="percentiles (repeatable; default 50, 90, 99)",
)
@click.option(
    "--threshold-pct",
    default=5.0,
    show_default=True,
    type=Number(0),
    help="a latency or throughput regression must exceed this relative change",
)
@click.option(
    "--confidence",
    default=0.95,
    show_default=True,
    type=Number(0.5, 1, min_open=True, max_open=True),
)
@click.option(
    "--primary",
    "primary",
    multiple=True,
    metavar="METRIC[:PCT]",
    help="declare a primary test (repeatable), e.g. ttft_ms:50, itl_ms:99, error_rate: only "
    "primary rows can be regressions (Holm over them); the rest are reported as changes",
)
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON")
def compare_command(
    runs: tuple[str, ...],
    candidate: str | None,
    baseline_schedule: str | None,
    last: int,
    metrics: tuple[str, ...],
    percentiles: tuple[float, ...],
    threshold_pct: float,
    confidence: float,
    primary: tuple[str, ...],
    as_json: bool,
) -> None:
    """Compare a candidate run against a baseline (ids, id prefixes or names).

    `compare BASELINE CANDIDATE` judges one run against one; `compare B1 B2 ... --candidate C`
    (or --baseline-schedule S --last K) against several baseline runs, counting run-to-run
    variation (a random-effects test with K-1 degrees of freedom). Every row is one test;
    regressions are decided by Holm's procedure over all of them, so identical servers show a
    regression at most 1 - confidence of the time.

    \b
    Exit codes:
      0  no significant regression
      1  a significant regression (latency, throughput or error rate)
      7  cannot compare: a side is invalid, partial or empty, or no load is in common
      2  bad input (wrong number of runs, bad option) or store error; nothing written
      6  no such run, or no completed valid run of --baseline-schedule
    """
    if candidate is None and (len(runs) != 2 or baseline_schedule):
        fail(
            "compare takes BASELINE CANDIDATE, or baseline runs with --candidate "
            f"CANDIDATE (got {len(runs)} run(s)"
            + (" and --baseline-schedule without --candidate)" if baseline_schedule else ")"),
            Exit.BAD_INPUT,
        )
    declared = _primary(primary) if primary else None
    base_refs, cand_ref = (list(runs), candidate) if candidate else ([runs[0]], runs[1])
    if not base_refs and not baseline_schedule:
        fail("no baseline: give baseline runs or --baseline-schedule", Exit.BAD_INPUT)
    try:
        with analysis_store() as conn:
            c_id = resolve_or_fail(conn, cand_ref)
            b_ids = [resolve_or_fail(conn, r) for r in base_refs]
            if baseline_schedule:
                b_ids += _schedule_runs(conn, baseline_schedule, last, c_id)
            b_ids = list(dict.fromkeys(b_ids))  # a run named twice counts once
            if c_id in b_ids and len(b_ids) > 1:
                fail(f"run {c_id[:8]} is both the candidate and a baseline run", Exit.BAD_INPUT)
            bases = [_side(conn, r) for r in b_ids]
            cand = _side(conn, c_id)
            b_sh, c_sh = shard_probes(conn, b_ids[0]), shard_probes(conn, c_id)
    except (StoreError, psycopg.Error) as e:
        fail(str(e), Exit.BAD_INPUT)
    result = compare_multi(
        bases,
        cand,
        metrics=metrics or _default_metrics(bases, cand),
        percentiles=percentiles or (50.0, 90.0, 99.0),
        threshold_pct=threshold_pct,
        confidence=confidence,
        primary=declared,
    )
    b_id = b_ids[0]
    b_run, c_run, b_df, c_df = bases[0].run, cand.run, bases[0].df, cand.df
    b_lv, c_lv = bases[0].levels, cand.levels
    diffs = label_differences(b_run, c_run)
    cost = cost_change(b_run, c_run, b_df, c_df, b_lv, c_lv)
    regions = compare_regions(region_breakdown(b_df, b_sh), region_breakdown(c_df, c_sh))
    if as_json:
        out = {
            "baseline": b_id,
            "baselines": b_ids,
            "candidate": c_id,
            "family": result.family,
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
        console.print(_family_line(result.family, len(b_ids)))
    if cost["baseline"]["basis"] or cost["candidate"]["basis"]:
        console.print(_cost_table(cost))
    if regions:
        console.print(_regions_table(regions))
    style = {Exit.PASSED: "green", Exit.FAILED: "bold red"}.get(result.code, "bold yellow")
    console.print(f"[{style}]{result.reason}[/] (exit {int(result.code)})")
    sys.exit(result.code)


def _primary(specs: tuple[str, ...]) -> frozenset[tuple[str, float | None]]:
    """--primary METRIC[:PCT] values as (metric, percentile); exit BAD_INPUT naming a bad one."""
    counted = (*THROUGHPUT_METRICS, ERROR_METRIC)
    out: set[tuple[str, float | None]] = set()
    for spec in specs:
        metric, _, pct = spec.partition(":")
        pct = pct.strip().removeprefix("p")
        if metric in counted and not pct:
            out.add((metric, None))
            continue
        if metric not in (*LATENCY_METRICS, *AUDIO_METRICS):
            fail(
                f"--primary {spec!r}: unknown metric {metric!r}; known: "
                + ", ".join((*LATENCY_METRICS, *AUDIO_METRICS, *counted)),
                Exit.BAD_INPUT,
            )
        try:
            p = float(pct)
        except ValueError:
            p = math.nan
        if not 0 <= p <= 100:
            fail(f"--primary {spec!r}: give a percentile 0..100, e.g. {metric}:50", Exit.BAD_INPUT)
        out.add((metric, p))
    return frozenset(out)


def _default_metrics(bases: list[Side], cand: Side) -> tuple[str, ...]:
    """Every latency; a speech run's own (time to first audio byte, real-time factor) too when
    every run compared has audio."""
    spoken = all(has_audio(s.df) for s in (*bases, cand))
    return (*LATENCY_METRICS, *AUDIO_METRICS) if spoken else LATENCY_METRICS


def _side(conn: psycopg.Connection[Any], run_id: str) -> Side:
    return Side(load_run(conn, run_id), load_requests(conn, run_id), load_levels(conn, run_id))


def _schedule_runs(conn: psycopg.Connection[Any], schedule: str, last: int, cand: str) -> list[str]:
    """The newest `last` completed, valid runs of the schedule other than the candidate,
    oldest first; exit MISSING when there is none."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT run_id::text FROM runs WHERE schedule_name = %s AND status = 'completed' "
            "AND valid AND run_id::text <> %s ORDER BY created_at DESC LIMIT %s",
            (schedule, cand, last),
        )
        ids = [str(r[0]) for r in cur.fetchall()][::-1]
    if not ids:
        fail(f"no completed, valid run of schedule {schedule!r} to use as baseline", Exit.MISSING)
    return ids


def _family_line(family: dict[str, Any], k: int) -> str:
    runs = (
        f"{k} baseline runs: run-to-run variation counted"
        if k > 1
        else "one baseline run: run-to-run variation NOT counted"
    )
    return (
        f"family: {family.get('family_size', 0)} tests, {family.get('correction')} correction, "
        f"family-wise error rate {family.get('familywise_error_rate', 0):.0%}; {runs}"
    )


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
        "n (req)",
        "p",
        "p Holm",
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
            _n(r),
            _f(r["p_value"], "{:.2g}"),
            _f(r["p_adjusted"], "{:.2g}"),
            verdict,
        )
    return t


def _n(r: pd.Series) -> str:
    """Requests per side; a token metric's tokens beside them."""
    n = f"{r['n_base']}/{r['n_cand']}"
    tb, tc = r.get("tokens_base"), r.get("tokens_cand")
    if tb is not None and tb == tb and tc is not None and tc == tc:
        n += f" ({int(tb)}/{int(tc)} tok)"
    return n


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
