"""Compare: several runs side by side — overlaid percentile curves, throughput-latency
frontiers across runs or targets, and a table of changes against a baseline with intervals."""

from __future__ import annotations

import streamlit as st

from ui import charts
from ui.data import compare as compare_data
from ui.data import shared
from ui.views.common import METRICS, chart, csv_download, pick_metric, pick_runs

st.title("Compare runs")
chosen = pick_runs("Runs to compare")
if len(chosen) < 2:
    st.info("Pick at least two runs (or select several on the Runs page).")
    st.stop()
names = shared.labels_for(tuple(chosen))
compare_data.preload(chosen)

st.subheader("Percentile curves")
metric = pick_metric("cmp_metric")
curves = compare_data.compare_spectra(tuple(chosen), metric)
chart(
    charts.percentile_curves(curves, f"{METRICS[metric]} percentiles", f"{METRICS[metric]} (ms)"),
    curves,
    f"compare-percentiles-{metric}",
)

st.subheader("Throughput-latency frontier")
f_metric, f_q = st.columns(2)
with f_metric:
    fm = pick_metric("cmp_frontier_metric", ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"))
fq = f_q.radio(
    "Percentile",
    [50.0, 90.0, 99.0],
    index=2,
    horizontal=True,
    key="cmp_q",
    format_func=lambda q: f"p{q:g}",
)
points = compare_data.frontier(tuple(chosen), fm, fq)
chart(
    charts.frontier(
        points, f"Output tokens/s against p{fq:g} {METRICS[fm]}", f"p{fq:g} {METRICS[fm]} (ms)"
    ),
    points,
    f"compare-frontier-{fm}-p{fq:g}",
)
st.caption(
    "One point per load level, with its 95% bootstrap band; ringed points are on the "
    "run's Pareto front, a star marks its knee (Kneedle)."
)

st.subheader("Cost")
costs = compare_data.cost_overview(tuple(chosen))
costs["run"] = [names.get(r, r) for r in costs["run"]]
st.table(costs)
st.caption(
    "Self-hosted: the hourly price over the run's wall time, and per million output tokens at "
    "the best level's measured throughput; per-token: the tokens billed at the stored prices."
)

st.subheader("Changes against a baseline")
baseline = st.selectbox("Baseline", chosen, format_func=lambda k: names.get(k, k), key="cmp_base")
with_itl = st.checkbox(
    "Include ITL per token (resampled by request, all its tokens together: slow on large runs)",
    key="cmp_itl",
)
table = compare_data.changes(tuple(chosen), baseline, with_itl)
st.dataframe(
    table,
    hide_index=True,
    column_config={
        "baseline": st.column_config.NumberColumn("baseline (ms)", format="%.3f"),
        "candidate": st.column_config.NumberColumn("this run (ms)", format="%.3f"),
        "delta": st.column_config.NumberColumn("change (ms)", format="%+.3f"),
        "delta_pct": st.column_config.NumberColumn("change %", format="%+.1f%%"),
        "ci_lower": st.column_config.NumberColumn("95% CI low (ms)", format="%+.3f"),
        "ci_upper": st.column_config.NumberColumn("95% CI high (ms)", format="%+.3f"),
        "p_worse": st.column_config.NumberColumn("p (one-sided)", format="%.2g"),
        "p_adjusted": st.column_config.NumberColumn("p (Holm)", format="%.2g"),
        "n_base": st.column_config.NumberColumn("n baseline (requests)"),
        "n_cand": st.column_config.NumberColumn("n this run (requests)"),
    },
)
sizes = sorted({int(x) for x in table.get("family_size", [])}) if len(table) else []
st.caption(
    "Per metric, level (matched by index) and percentile; steady phase, ok requests; the request "
    "is the unit (ITL: requests resampled with all their tokens). Each run's rows are one family: "
    "a regression is > 5% worse with its Holm-adjusted one-sided p < 0.05 (family-wise error "
    f"rate 5%; family size {', '.join(map(str, sizes)) or '—'} tests). One baseline run: "
    "run-to-run variation is not counted (`peakload compare B1 B2 ... --candidate C` counts it)."
)
csv_download(table, "changes")
