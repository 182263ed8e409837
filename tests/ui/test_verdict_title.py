"""The criteria table under `peakload run`'s summary says which requests it judged: a search's one
level, each claim at each load of a sweep, or every steady request of its levels pooled when no
claim is spread (analysis.verdicts.verdict.judge_run),
so a verdict's n is read as what it is."""

from __future__ import annotations

from typing import Any

import pandas as pd
from rich.console import Console

from analysis.verdicts import sla
from analysis.verdicts.verdict import error_budget
from ui.results import print_verdict


def _summary(levels: int, level: int | None) -> dict[str, Any]:
    steady_ok = pd.DataFrame(
        {"phase": ["steady"] * 20, "outcome": ["ok"] * 20, "error_phase": None}
    )
    budget: sla.ClaimVerdict = error_budget(steady_ok, 0.01, 0.99)
    return {
        "levels": [{"level": i} for i in range(levels)],
        "verdict": {
            "exit_code": 3,
            "verdict": "undecidable",
            "reason": "insufficient samples",
            "level": level,
            "criteria": [budget.to_json()],
        },
    }


def _printed(summary: dict[str, Any]) -> str:
    console = Console(record=True, width=400)
    print_verdict(summary, console)
    return console.export_text()


def test_a_sweeps_criteria_say_its_levels_are_pooled() -> None:
    assert "every steady request of the run's 3 levels pooled" in _printed(_summary(3, None))


def test_a_search_names_its_level_and_one_level_needs_no_word() -> None:
    assert "criteria at level 2" in _printed(_summary(3, 2))
    text = _printed(_summary(1, None))
    assert "pooled" not in text and "criteria" in text


def test_a_sweeps_claims_say_they_were_judged_at_each_load() -> None:
    summary = _summary(3, None)
    summary["verdict"]["loads"] = 3
    text = _printed(summary)
    assert "each claim at each of the run's 3 loads, the error budget over all" in text
    assert "pooled" not in text
