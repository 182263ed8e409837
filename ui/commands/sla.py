"""`peakload sla RUN --claims FILE`: a verdict per SLA claim from the exact binomial rule
(analysis.sla). Exit codes: 0 every claim passes; 1 any claim fails (a disproved claim
dominates); 2 none fails but some lack samples; 3 bad input or store error."""

from __future__ import annotations

import json
import sys

import click
import psycopg
from rich.console import Console
from rich.table import Table

from analysis import sla
from analysis.load import load_requests
from loadgen.errors import SpecError, StoreError
from ui.commands.runs import analysis_store, fail, resolve_or_fail

EXIT_BAD_INPUT = 3
_STYLE = {"pass": "green", "fail": "bold red", "insufficient samples": "yellow"}


def verdict_table(verdicts: list[sla.ClaimVerdict]) -> Table:
    t = Table(title="SLA verdicts (exact binomial; exceedance = value >= threshold)")
    for col in (
        "claim",
        "n",
        "exceed",
        "observed",
        "exceed. bound (upper)",
        "allowed",
        "confidence",
        "needed",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("claim", "verdict") else "right")
    for v in verdicts:
        obs = "—" if v.observed is None else f"{v.observed:,.1f}"
        t.add_row(
            v.claim,
            str(v.n),
            str(v.exceedances),
            obs,
            f"{v.exceed_upper:.4%}",
            f"{v.allowed:.2%}",
            f"{v.confidence:.0%}",
            str(v.samples_needed),
            f"[{_STYLE[v.verdict]}]{v.verdict}[/]",
        )
    return t


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
    type=click.FloatRange(0.5, 1.0, min_open=True, max_open=True),
    help="override the claims file's confidence (default 0.99)",
)
@click.option("--json", "as_json", is_flag=True, help="print the verdicts as JSON")
def sla_command(run: str, claims_path: str, confidence: float | None, as_json: bool) -> None:
    """Check SLA claims against RUN (id, id prefix or name)."""
    try:
        claims = sla.load_claims(claims_path)
        with analysis_store() as conn:
            run_id = resolve_or_fail(conn, run, EXIT_BAD_INPUT)
            df = load_requests(conn, run_id)
    except SpecError as e:
        fail(str(e), EXIT_BAD_INPUT)
    except (StoreError, psycopg.Error) as e:
        fail(str(e), EXIT_BAD_INPUT)
    verdicts = sla.evaluate(df, claims, confidence=confidence)
    code = sla.exit_code(verdicts)
    if as_json:
        out = {"run_id": run_id, "exit_code": code, "verdicts": [v.to_json() for v in verdicts]}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        Console().print(verdict_table(verdicts))
    sys.exit(code)
