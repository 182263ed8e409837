"""Nightly: each schedule's history per metric, with detected change points and the verdict
`peakload nightly` gives (analysis.verdicts.nightly); click through to any run."""

from __future__ import annotations

import streamlit as st

from analysis.verdicts import nightly as anightly
from analysis.verdicts.exitcodes import Exit
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

t_col, i_col = st.columns(2)
threshold = t_col.number_input(
    "Threshold (%)",
    min_value=0.0,
    value=anightly.DEFAULT_THRESHOLD_PCT,
    step=1.0,
    key="n_threshold",
    help="changes up to this size (percent of the level before) do not decide the verdict",
)
include_invalid = i_col.checkbox("Use invalid and unended runs in the detection", key="n_invalid")

history, result = nightly_data.nightly(schedule, metric, q, threshold, include_invalid)
code = Exit(result["exit_code"])
verdict = (
    f"**{result['verdict'].upper()}** (exit {int(code)}): "
    f"{anightly.verdict_reason(result, metric, threshold)}"
)
if result.get("newest_run_problem"):
    verdict += f" But {result['newest_run_problem']}: that decides."
{Exit.PASSED: st.success, Exit.FAILED: st.error}.get(code, st.warning)(verdict)
command = f"peakload nightly {schedule} --metric {metric} --percentile {q:g}"
command += f" --last {anightly.HISTORY_LIMIT}"
command += f" --threshold-pct {threshold:g}" + (" --include-invalid" if include_invalid else "")
st.caption(f"The same verdict as `{command}`.")
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
