"""The Live page's data: running runs and their progress from ticks, fresh within a second."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analysis.store import buckets
from analysis.store import load as al
from ui.data import shared

LIVE_TTL_S = 1


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def running_runs() -> dict[str, str]:
    """Runs with status `running` (newest first): run_id -> label, read without their
    request counts (every second: a running run's count is an index scan of its rows), a
    local run whose process died reaped first (shared.read_labels)."""
    return shared.read_labels(status="running", limit=50)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def run_status(run_id: str) -> dict[str, Any]:
    """The run's row, fresh within a second (for the Live page)."""
    with shared.store().conn() as c:
        return al.load_run(c, run_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def live_series(run_id: str) -> pd.DataFrame:
    with shared.store().conn() as c:
        return buckets.timeseries(c, run_id, 1.0)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def live_regions(run_id: str) -> pd.DataFrame:
    """Per region, from the ticks so far: started, completed, errors, output tokens, in flight
    now (last tick), seconds covered, and the generator's worst loop lag (ms)."""
    with shared.store().conn() as c:
        t = al.load_ticks(c, run_id)
    cols = [
        "region",
        "seconds",
        "started",
        "completed",
        "errors",
        "output_tokens",
        "in_flight",
        "loop_lag_ms_max",
    ]
    if t.empty:
        return pd.DataFrame(columns=cols)
    last = t[t["t"] == t.groupby("region")["t"].transform("max")]
    g = t.groupby("region").agg(
        seconds=("t", "nunique"),
        started=("started", "sum"),
        completed=("completed", "sum"),
        errors=("errors", "sum"),
        output_tokens=("output_tokens", "sum"),
        loop_lag_ms_max=("loop_lag_ms_max", "max"),
    )
    g["in_flight"] = last.groupby("region")["in_flight"].sum()
    return g.reset_index()[cols]
