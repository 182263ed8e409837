"""The Nightly page's data: the schedules that have runs, and one schedule's history with its
change points (analysis.nightly)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analysis import nightly as anightly
from ui.data import shared


@st.cache_data(ttl=shared.RUNS_TTL_S, show_spinner=False)
def schedules() -> list[str]:
    """Schedule names that have runs, alphabetically."""
    df = shared.runs(limit=5000)
    names = df["schedule_name"].dropna().unique().tolist()
    return sorted(str(n) for n in names)


NIGHTLY_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttfat_ms")


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def nightly(schedule: str, metric: str, percentile: float) -> pd.DataFrame:
    """A schedule's history, oldest first (analysis.nightly.history_with_changes): per run the
    pooled `percentile` of `metric` (ms), with `change_point` true where a new mean starts."""
    with shared.store().conn() as c:
        hist, cps = anightly.history_with_changes(c, schedule, metric=metric, percentile=percentile)
    hist["change_point"] = False
    if cps:
        hist.loc[hist.index[cps], "change_point"] = True
    hist["valid"] = [shared.validity_word(v) for v in hist["valid"]]
    return hist


def nightly_links(history: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per run of a history, newest first."""
    if history.empty:
        return []
    out = history.sort_values("created_at", ascending=False)
    cols = ["run_id", "name", "created_at", "valid", "change_point"]
    return [{str(k): v for k, v in r.items()} for r in out[cols].to_dict("records")]
