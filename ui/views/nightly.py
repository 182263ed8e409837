"""Nightly: each schedule's history per metric and level, with detected change points; click
through to any run."""

from __future__ import annotations

import streamlit as st

from ui import charts
from ui.data import nightly as nightly_data
from ui.views.common import METRICS, RUN_PARAM, chart, pick_metric

st.title("Nightly trends")
names = nightly_data.schedules()
if not names:
    st.info("No scheduled runs yet: add one with `peakload schedule add`.")
    st.stop()

s_col, m_col, q_col = st.columns(3)
schedule = s_col.selectbox("Schedule", names, key="n_schedule")
with m_col:
    metric = pick_metric("n_metric", nightly_data.NIGHTLY_METRICS)
q = q_col.radio(
    "Percentile",
    [50.0, 90.0, 99.0],
    index=2,
    horizontal=True,
    key="n_q",
    format_func=lambda p: f"p{p:g}",
)

history = nightly_data.nightly(schedule, metric, q)
chart(
    charts.nightly(history, f"{schedule}: p{q:g} {METRICS[metric]} per run", f"p{q:g} (ms)"),
    history,
    f"nightly-{schedule}-{metric}-p{q:g}",
)
st.caption(
    "Each point pools a run's ok steady requests. A diamond marks the first run of a new "
    "level (binary segmentation on the mean, BIC penalty, at least 3 runs per segment)."
)

st.subheader("Runs")
for row in nightly_data.nightly_links(history):
    st.page_link(
        "views/run.py",
        label=f"{row['created_at']:%Y-%m-%d %H:%M} · {row['name']} · {row['valid']}"
        + (" · change point" if row["change_point"] else ""),
        query_params={RUN_PARAM: row["run_id"]},
    )
