"""The Nightly page's data: the schedules that have runs, and one schedule's history with its
change points and verdict (analysis.verdicts.nightly)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analysis.verdicts import nightly as anightly
from ui.data import shared


@st.cache_data(ttl=shared.RUNS_TTL_S, show_spinner=False)
def schedules() -> list[str]:
    """Schedule names that have runs, alphabetically (analysis.verdicts.nightly.schedule_names,
    as `peakload nightly`: every schedule, read from the runs table alone, not from the newest
    5,000 runs with their request counts)."""
    with shared.store().conn() as c:
        return anightly.schedule_names(c)


NIGHTLY_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttfat_ms")


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def nightly(
    schedule: str,
    metric: str,
    percentile: float,
    threshold_pct: float = anightly.DEFAULT_THRESHOLD_PCT,
    include_invalid: bool = False,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A schedule's history, oldest first, and its verdict, as `peakload nightly` judges it
    (analysis.verdicts.nightly.judge_schedule): per run the pooled `percentile` of `metric` (ms),
    with `change_point` true where a new mean starts."""
    with shared.store().conn() as c:
        hist, result = anightly.judge_schedule(
            c,
            schedule,
            threshold_pct=threshold_pct,
            include_invalid=include_invalid,
            metric=metric,
            percentile=percentile,
        )
    hist["change_point"] = [bool(r["change_point"]) for r in result["runs"]]
    hist["valid"] = [shared.validity_word(v) for v in hist["valid"]]
    return hist, result


def nightly_links(history: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per run of a history, newest first."""
    if history.empty:
        return []
    out = history.sort_values("created_at", ascending=False)
    cols = ["run_id", "name", "created_at", "valid", "change_point"]
    return [{str(k): v for k, v in r.items()} for r in out[cols].to_dict("records")]
