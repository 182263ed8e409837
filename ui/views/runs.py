"""Runs: every stored run in a searchable table, filtered by name, target, model, label, who
launched it, preset, tag, status and date; pick one to open, or several to compare."""

from __future__ import annotations

import streamlit as st

from ui.data import runs as runs_data
from ui.data import shared
from ui.views.common import RUN_PARAM, RUNS_PARAM

st.title("Runs")
st.caption("Stored runs, newest first. Select rows to open one run or compare several.")

search, target, model, label = st.columns(4)
name_q = search.text_input("Name contains", key="f_name")
target_q = target.text_input("Target contains", key="f_target")
model_q = model.text_input("Model (exact)", key="f_model")
label_q = label.text_input("Label (key=value)", key="f_label", placeholder="engine=vllm")
owner, preset, tag, _ = st.columns(4)
owner_q = owner.text_input("Launched by (exact)", key="f_owner")
preset_q = preset.text_input("Preset (exact)", key="f_preset", placeholder="vllm")
tag_q = tag.text_input("Tag (exact)", key="f_tag", placeholder="baseline")
status_col, since_col, until_col, _ = st.columns(4)
status_q = status_col.selectbox(
    "Status",
    ["", "completed", "partial", "running", "aborted", "failed", "pending"],
    format_func=lambda s: s or "any",
    key="f_status",
)
since = since_col.date_input("Started on or after", value=None, key="f_since")
until = until_col.date_input("Started on or before", value=None, key="f_until")

found = shared.runs(
    name_q,
    target_q,
    model_q.strip(),
    label_q,
    status_q,
    launched_by=owner_q.strip(),
    preset=preset_q.strip(),
    tag=tag_q.strip(),
)
table = runs_data.runs_table(found, since, until)
st.write(f"**{len(table)}** run(s)")

picked = st.dataframe(
    table,
    hide_index=True,
    on_select="rerun",
    selection_mode="multi-row",
    key="runs_table",
    column_order=[c for c in table.columns if c != "run_id"],
    column_config={
        "start": st.column_config.DatetimeColumn("start (UTC)", format="YYYY-MM-DD HH:mm:ss"),
        "duration_s": st.column_config.NumberColumn("duration (s)", format="%.1f"),
        "requests": st.column_config.NumberColumn("requests", format="%d"),
        "errors": st.column_config.NumberColumn("errors", format="%d"),
    },
)
chosen = [str(table["run_id"].iloc[i]) for i in picked.selection.rows]

open_col, compare_col, _ = st.columns([1, 1, 4])
if open_col.button("Open run", disabled=len(chosen) != 1, type="primary"):
    st.switch_page("views/run.py", query_params={RUN_PARAM: chosen[0]})
if compare_col.button("Compare runs", disabled=len(chosen) < 2):
    st.switch_page("views/compare.py", query_params={RUNS_PARAM: ",".join(chosen)})

with st.expander("Links to each run"):
    for rid, name in zip(table["run_id"], table["name"], strict=True):
        st.page_link("views/run.py", label=f"{name} · {rid[:8]}", query_params={RUN_PARAM: rid})
