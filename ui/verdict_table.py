"""The table of verdicts a command prints: one row per criterion or claim (analysis.verdicts.sla's
ClaimVerdict), under `peakload run`'s summary, `report` and `sla`."""

from __future__ import annotations

from rich.table import Table

from analysis.verdicts import sla
from analysis.verdicts.verdict import ERROR_METRIC, LOAD_METRIC

_STYLE = {"pass": "green", "fail": "bold red", "insufficient samples": "yellow"}


def verdict_table(verdicts: list[sla.ClaimVerdict], title: str = "SLA verdicts") -> Table:
    t = Table(
        title=f"{title} (exact binomial; itl_ms: the request as the unit; exceedance = value "
        ">= threshold, or a failure)"
    )
    for col in (
        "claim",
        "n",
        "tokens",
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
        obs = (
            "—"
            if v.observed is None
            else f"{v.observed:.2%}"
            if v.metric in (ERROR_METRIC, LOAD_METRIC)
            else f"{v.observed:,.1f}"
        )
        t.add_row(
            v.claim,
            str(v.n),
            "—" if v.tokens is None else str(v.tokens),
            str(v.exceedances),
            obs,
            f"{v.exceed_upper:.4%}",
            f"{v.allowed:.2%}",
            f"{v.confidence:.0%}",
            str(v.samples_needed),
            f"[{_STYLE[v.verdict]}]{v.verdict}[/]",
        )
    return t
