"""Run: one stored run — its cards and validity, percentile curves (log latency axis across
decades), a metric per N-second window beside the server's series, throughput / in-flight /
errors over time per region with the server's own metrics and the diagnosis beside them, the
per-level table (with connection set-up and re-sends), a token timeline of sampled requests,
failures by kind, the test-matrix labels, client vs server (when the server reported its own
timings), and exports."""

from __future__ import annotations

import streamlit as st

from analysis.reports.summary_table import search_line
from ui import annotate, charts
from ui.data import run as run_data
from ui.data import shared
from ui.login import current_visitor
from ui.views.common import METRICS, chart, fmt, pick_metric, pick_run, verdict_alert

SLICE_METRICS = ("ttft_ms", "ttfat_ms", "ttft_sched_ms", "tpot_ms", "e2e_ms", "e2e_sched_ms")
WINDOWS_S = (1, 2, 5, 10, 15, 30, 60)

picked = pick_run()
if picked is None:
    st.stop()
run_id: str = str(picked)
run = shared.run(run_id)
shared.preload(run_id)  # every chart below counts arrivals: the frame and its arrays at once
summary = shared.summary(run_id)
cards = run_data.headline(summary)

st.title(f"Run: {run['name']}")
st.caption(
    f"{run_id} · {run['api']} {run['target_url']} · model {run['model']} · "
    f"status **{run['status']}** · mode {run['mode']}"
    + (f" · launched by **{run['launched_by']}**" if run.get("launched_by") else "")
)

if summary["valid"] is False:
    st.error(
        "**INVALID run** — the generator, not the server, may have shaped these numbers:\n\n"
        + "\n".join(f"- {why}" for why in summary["invalid_reasons"]),
        icon=":material/warning:",
    )
elif summary["valid"] is None:
    st.warning("Validity unknown: the run has not finished (or ended without a verdict).")
else:
    st.success(
        "Valid run: the generator's self-checks stayed within bounds.",
        icon=":material/check_circle:",
    )
if run.get("status_reason"):
    st.info(f"Status reason: {run['status_reason']}")
annotate.show(run_id, current_visitor())

if not cards["requests"]:
    st.warning(
        f"This run has no requests: nothing was measured, so there are no latencies, rates or "
        f"charts to show. It ended **{run['status']}**."
    )
    st.stop()

c = st.columns(6)
c[0].metric("Requests", fmt(cards["requests"], 0))
c[1].metric("Failed", fmt(cards["failed"], 0))
c[2].metric(
    "Error rate", fmt(None if cards["error_rate"] is None else 100 * cards["error_rate"], 2, "%")
)
c[3].metric("Best req/s", fmt(cards["best_request_rate"], 2))
c[4].metric("Best output tok/s", fmt(cards["best_tokens_per_s"], 1))
c[5].metric(f"p99 TTFT, level {cards['busiest_level']}", fmt(cards["p99_ttft_ms"], 1, "ms"))

judged = run_data.verdict(run_id)
verdict_alert(judged, prefix="Verdict: ", exit_note="as `peakload run` exits")
with st.expander("The criteria behind the verdict (the spec's SLOs and error budget)"):
    if judged.get("loads", 1) > 1:
        st.caption(
            f"Each SLO at each of the run's {judged['loads']} loads (a pass needs every load), "
            "the error budget over all steady requests; a fail must survive Holm over every test."
        )
    st.table(run_data.criteria_table(judged).set_index("claim"))

server_timed = bool(summary.get("server_timings"))
spoken = any(lv.get("audio") for lv in summary.get("levels", []))  # a speech run
names = [
    "Percentiles",
    "Over time",
    "Timeslices",
    "Levels",
    "Token timeline",
    "Failures",
    "Labels",
    # only when the server reported its own timings (llama.cpp, Ollama, TGI do)
    *(["Client vs server"] if server_timed else []),
    *(["Audio"] if spoken else []),
    "Export",
]
tabs = dict(zip(names, st.tabs(names), strict=True))

with tabs["Percentiles"]:
    left, right = st.columns(2)
    with left:
        metric = pick_metric("run_metric")
    with right:
        by = st.radio("One curve per", ["level", "region"], horizontal=True, key="run_by")
    curves = run_data.spectra(run_id, metric, by)
    chart(
        charts.percentile_curves(
            curves, f"{METRICS[metric]} percentiles by {by}", f"{METRICS[metric]} (ms)"
        ),
        curves,
        f"percentiles-{metric}-{by}-{run_id[:8]}",
    )
    st.caption(
        "Steady phase, ok requests. Shaded: 95% bootstrap band per percentile. The latency axis "
        "turns logarithmic when the curves span more than a decade, so every level stays legible."
    )

with tabs["Over time"]:
    ts = run_data.series(run_id)
    chart(
        charts.over_time(ts, "Throughput, in flight and failures per region"),
        ts,
        f"over-time-{run_id[:8]}",
    )
    net = run_data.region_network(run_id)
    if len(net):
        st.subheader("Network and server time per region (ms)")
        st.table(net)
        st.caption(
            "Steady-phase ok requests; server time = TTFT from send - the region's probe round "
            "trip; regions on the reference clock, each shard within its clock uncertainty."
        )
    srv = run_data.server_view(run_id)
    srv_rows = run_data.server_rows(run_id, 1.0)
    st.subheader("Where the time went")
    st.info(f"**{srv['diagnosis']['verdict']}**: {srv['diagnosis']['sentence']}")
    if len(srv_rows):
        chart(
            charts.client_and_server(ts, srv_rows, "Client and server on one time axis"),
            srv_rows,
            f"client-server-{run_id[:8]}",
        )
        st.table(run_data.server_level_table(srv))
        st.caption(
            "Server series: "
            + ", ".join(f"{k} = `{v}`" for k, v in srv["metrics"].items())
            + ". Means over each level's steady span; server times from its own histograms."
        )

with tabs["Timeslices"]:
    left, right = st.columns(2)
    with left:
        slice_metric = pick_metric("slice_metric", SLICE_METRICS)
    with right:
        window = st.select_slider("Window (s)", WINDOWS_S, value=5, key="slice_window")
    slices = run_data.timeslices(run_id, slice_metric, float(window))
    server_rows = run_data.server_rows(run_id, float(window))
    chart(
        charts.timeslices(
            slices,
            server_rows,
            METRICS[slice_metric],
            f"{METRICS[slice_metric]} per {window} s window, beside the server's own series",
        ),
        slices,
        f"timeslices-{slice_metric}-{window}s-{run_id[:8]}",
    )
    st.caption(
        "Every request of the run (warm-up and cool-down too) in the window of its send; "
        "p50/p90/p99 over the window's ok requests. The server's series (when the run scraped "
        "its metrics or it reported its own timings) share the windows."
    )

with tabs["Levels"]:
    if search := search_line(summary):
        st.info(search)
    for lv in summary.get("levels") or []:
        if lv.get("flags"):
            st.warning(f"Level {lv['level']} did not deliver its load: " + "; ".join(lv["flags"]))
    st.dataframe(run_data.level_table(summary), hide_index=True)
    st.caption(
        "Latencies in ms (steady phase, ok requests; TTFT from send; ITL per token); "
        "throughput from arrivals: tokens that arrived and requests that completed inside "
        "each level's steady window, / window. New conn: share of sent requests that opened "
        "a connection, with its set-up time; re-sent: sent again on a new connection after a "
        "reused one died before any response byte."
    )
    adapters = run_data.adapter_table(summary)
    if not adapters.empty:
        st.subheader("Per adapter")
        st.dataframe(adapters, hide_index=True)
        st.caption(
            "Each LoRA adapter's own requests: ms over its ok steady requests, req/s and tok/s "
            "inside the level's steady window. Switch cost = TTFT p50 of its requests right "
            "after a switch (the one scheduled before asked another adapter) - TTFT p50 of its "
            "steady requests."
        )
    prefix = run_data.prefix_table(summary)
    if not prefix.empty:
        st.subheader("Prefix cache: with vs without the shared prefix")
        st.dataframe(prefix, hide_index=True)
        st.caption(
            "TTFT (ms) of requests carrying the run's shared prefix beside those without it, "
            "and the server's own count of cached prompt tokens (llama.cpp cache_n, usage "
            "cached_tokens); hit_share = share of requests it reported a hit for."
        )

with tabs["Token timeline"]:
    tl = run_data.token_timeline(run_id)
    chart(
        charts.token_timeline(tl, "Sampled requests: scheduled → end, with each chunk"),
        tl,
        f"token-timeline-{run_id[:8]}",
    )

with tabs["Failures"]:
    fails = run_data.failures(run_id)
    if fails.empty:
        st.success("No failed requests.")
    else:
        chart(charts.failures(fails, "Failed requests by kind"), fails, f"failures-{run_id[:8]}")
        st.dataframe(fails, hide_index=True)

with tabs["Labels"]:
    st.dataframe(run_data.labels_table(run), hide_index=True)
    if notes := run_data.imported(run_id):
        st.info("\n\n".join(notes))  # another tool's results: what they held, what they lacked
    probed = run_data.probe(run_id)
    if not probed.empty:
        st.write("What the target did with the run's request parameters (`peakload probe`):")
        st.dataframe(probed, hide_index=True)

if server_timed:
    with tabs["Client vs server"]:
        st.dataframe(run_data.client_vs_server_table(summary), hide_index=True)
        st.caption(
            "Client vs server, ms: p50 over ok steady requests the server timed. Server "
            "prefill includes its queue time where it reports one; server ITL is its decode "
            "time / (tokens - 1); gap = client p50 - server p50 (network, the client, and any "
            "queue the server does not report)."
        )

if spoken:
    with tabs["Audio"]:
        st.dataframe(run_data.audio_table(summary), hide_index=True)
        st.caption(
            "Steady phase, ok requests. TTFAB: time to first audio byte (speech out) or first "
            "transcript text (speech in), from send; RTF: E2E / audio length (below 1: faster "
            "than real time); audio x: audio seconds per wall second; chunk gap: between audio "
            "chunks; audio s/s: audio of the requests completed in the steady window per second."
        )

with tabs["Export"]:
    st.write("The run's requests, one row per request with every chunk's arrival.")
    e1, e2, e3 = st.columns(3)
    e1.download_button(
        "Requests as CSV",
        data=lambda: run_data.export_bytes(run_id, "csv"),
        file_name=f"{run_id}.csv",
        mime="text/csv",
        on_click="ignore",
        key="export_csv",
    )
    e2.download_button(
        "Requests as Parquet",
        data=lambda: run_data.export_bytes(run_id, "parquet"),
        file_name=f"{run_id}.parquet",
        mime="application/vnd.apache.parquet",
        on_click="ignore",
        key="export_parquet",
    )
    e3.download_button(
        "HTML report",
        data=lambda: run_data.report_html(run_id),
        file_name=f"{run_id}.html",
        mime="text/html",
        on_click="ignore",
        key="export_html",
    )
