"""`peakload sla RUN --claims FILE`: a verdict per SLA claim, and on the run's error budget, from
the exact binomial rule (analysis.verdicts.sla, analysis.verdicts.verdict). Exit codes
(analysis.verdicts.exitcodes): 0 all pass; 1 any fails (a disproved claim dominates); 3 none fails
but some lack samples, or the run is empty; 4 the run is invalid; 5 partial or not ended; 2 bad
input or store error; 6 no such run."""

from __future__ import annotations

import json
import sys

import click
import psycopg
from rich.console import Console

from analysis.store.load import load_levels, load_requests, load_run
from analysis.verdicts import sla
from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.verdict import RunJudgement, judge_claims
from loadgen.errors import SpecError, StoreError
from ui.commands.store_refs import analysis_store, fail, resolve_or_fail
from ui.options import Number
from ui.output import stdout_console
from ui.verdict_table import verdict_table


@click.command("sla")
@click.argument("run")
@click.option(
    "--claims",
    "claims_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="TOML with [[claims]] metric, percentile, threshold",
)
@click.option(
    "--confidence",
    type=Number(0.5, 1.0, min_open=True, max_open=True),
    help="override the claims file's confidence (default 0.99)",
)
@click.option("--json", "as_json", is_flag=True, help="print the verdicts as JSON")
def sla_command(run: str, claims_path: str, confidence: float | None, as_json: bool) -> None:
    """Check SLA claims against RUN (id, id prefix or name)."""
    try:
        claims = sla.load_claims(claims_path)
        with analysis_store() as conn:
            run_id = resolve_or_fail(conn, run)
            run_row = load_run(conn, run_id)
            df = load_requests(conn, run_id)
            levels = load_levels(conn, run_id)
    except (SpecError, StoreError, psycopg.Error) as e:
        fail(str(e), Exit.BAD_INPUT)
    judged = judge_claims(run_row, df, claims, confidence=confidence, levels=levels)
    if as_json:
        out = {"run_id": run_id, **judged.to_json()}
        out["verdicts"] = out.pop("criteria")
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        console = stdout_console()
        title = "SLA verdicts"
        if judged.loads > 1:
            title += f", each claim naming no level at each of the run's {judged.loads} loads"
        console.print(verdict_table(judged.verdicts, title=title))
        print_judgement(judged, console)
    sys.exit(judged.code)


def print_judgement(judged: RunJudgement, console: Console) -> None:
    style = "green" if judged.code is Exit.PASSED else "bold red"
    name = judged.code.name.replace("_", " ")
    console.print(f"[{style}]{name}[/] (exit {int(judged.code)}): {judged.reason}")
