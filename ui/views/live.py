"""Live: a running run's progress per region, refreshed every two seconds from its ticks."""

from __future__ import annotations

import streamlit as st

from ui import charts
from ui.data import live as live_data
from ui.data import shared
from ui.views.common import RUN_PARAM, chart

REFRESH_S = 2

st.title("Live")
running = live_data.running_runs()
current = st.query_params.get(RUN_PARAM)
options = dict(running)
if current and current not in options:
    try:
        options = {current: shared.labels_for((current,))[current], **options}
    except KeyError:
        st.error(f"Run {current} is not in the store.")
        current = None
if not options:
    st.info(
        "No run is in progress. Start one with `peakload run`, `peakload submit` or the "
        "Launch page."
    )
    st.stop()
keys = list(options)
run_id = st.selectbox(
    "Run",
    keys,
    index=keys.index(current) if current in keys else 0,
    format_func=lambda k: options[k],
)
if st.query_params.get(RUN_PARAM) != run_id:
    st.query_params[RUN_PARAM] = run_id


@st.fragment(run_every=REFRESH_S)
def progress() -> None:
    """Re-drawn every REFRESH_S seconds: status, per-region counts, the last minutes' series."""
    run = live_data.run_status(run_id)
    st.write(
        f"**{run['name']}** · status **{run['status']}** · "
        f"{run['requests']} requests recorded so far"
    )
    st.dataframe(live_data.live_regions(run_id), hide_index=True)
    ts = live_data.live_series(run_id)
    chart(charts.live(ts, "Per region, per second"), ts, f"live-{run_id[:8]}")
    if run["status"] != "running":
        st.success(f"The run has ended ({run['status']}).")
        st.page_link("views/run.py", label="Open its results", query_params={RUN_PARAM: run_id})


progress()
