"""Plotly figure builders: pure functions from analysis results (frames from ui.data) to figures.
No SQL, no Streamlit. Colours are left to the theme (`st.plotly_chart(theme="streamlit")`) so
light and dark both read; hover shows exact values with units.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.server_metrics import SPLIT_LINES, series_by_source

TAIL_TICKS = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999)
# mid-tone colours that read on both the light and the dark theme; one per series, fixed
PALETTE = ("#4C8BF5", "#F2994A", "#27AE60", "#EB5757", "#9B51E0", "#2D9CDB", "#F2C94C", "#B4656F")
MARK_COLOUR = "#EB5757"


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


_EMPTY_NOTE = "no samples"


def _empty(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, annotations=[{"text": _EMPTY_NOTE, "showarrow": False}])
    return fig


def _tail_axis(fig: go.Figure, max_x: float, row: int | None = None) -> None:
    """x = 1 / (1 - p) on a log axis, labelled with percentiles (HdrHistogram style)."""
    ticks = [t for t in (0.0, *TAIL_TICKS) if 1.0 / (1.0 - t / 100.0) <= max_x * 1.01]
    fig.update_xaxes(
        type="log",
        tickvals=[1.0 / (1.0 - t / 100.0) for t in ticks],
        ticktext=[f"p{t:g}" if t else "p0" for t in ticks],
        title_text="percentile (tail axis: 1 / (1 - p))",
        row=row,
        col=1 if row else None,
    )


def percentile_curves(df: pd.DataFrame, title: str, y_label: str) -> go.Figure:
    """One line per `series` (value_ms against x), with its distribution-free band shaded.
    `df` as from ui.derive.spectrum/spectra_by: series, percentile, x, value_ms, lo_ms, hi_ms."""
    if df.empty:
        return _empty(title)
    fig = go.Figure()
    for i, (name, g) in enumerate(df.groupby("series", sort=False)):
        fig.add_trace(
            go.Scatter(
                x=np.r_[g["x"], g["x"][::-1]],
                y=np.r_[g["hi_ms"], g["lo_ms"][::-1]],
                fill="toself",
                fillcolor=colour(i),
                opacity=0.2,
                line={"width": 0, "color": colour(i)},
                hoverinfo="skip",
                showlegend=False,
                legendgroup=str(name),
                name=f"{name} band",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=g["x"],
                y=g["value_ms"],
                mode="lines",
                line={"color": colour(i)},
                name=str(name),
                legendgroup=str(name),
                customdata=np.c_[g["percentile"], g["lo_ms"], g["hi_ms"], g["n"]],
                hovertemplate=(
                    "p%{customdata[0]:.4g}: %{y:.3f} ms"
                    "<br>95% band %{customdata[1]:.3f} to %{customdata[2]:.3f} ms"
                    "<br>n = %{customdata[3]:,}<extra>%{fullData.name}</extra>"
                ),
            )
        )
    _tail_axis(fig, float(df["x"].max()))
    fig.update_layout(title=title, yaxis_title=y_label, hovermode="closest", legend_title=None)
    return fig


def over_time(df: pd.DataFrame, title: str) -> go.Figure:
    """Three stacked panels per region: output tokens/s, mean in flight, failed/s (from
    analysis.load.timeseries; bucket start in UTC)."""
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("output tokens/s", "in flight (mean)", "failed requests/s"),
    )
    if df.empty:
        fig.update_layout(title=title)
        return fig
    for i, (region, g) in enumerate(df.groupby("region", sort=True)):
        for row, col in ((1, "output_tokens_per_s"), (2, "in_flight"), (3, "failed_per_s")):
            fig.add_trace(
                go.Scatter(
                    x=g["bucket"],
                    y=g[col],
                    mode="lines+markers",
                    line={"color": colour(i)},
                    marker={"size": 4},
                    name=str(region),
                    legendgroup=str(region),
                    showlegend=row == 1,
                    hovertemplate=f"%{{x|%H:%M:%S}} UTC: %{{y:.3f}}<extra>{region}</extra>",
                ),
                row=row,
                col=1,
            )
    fig.update_layout(title=title, height=620, hovermode="x unified", legend_title="region")
    fig.update_xaxes(title_text="time (UTC)", row=3, col=1)
    return fig


def client_and_server(ts: pd.DataFrame, server: pd.DataFrame, title: str) -> go.Figure:
    """The client's throughput, in-flight and TTFT above the server's queue, running requests,
    KV use and its own TTFT / queue time, on one time axis (the same UTC buckets)."""
    panels = (
        "output tokens/s (all regions)",
        "in flight (mean)",
        "client TTFT from send, ms",
        "server queue / running",
        "server KV use (0-1)",
        "server TTFT = queue + prefill, mean ms, by source",
    )
    fig = make_subplots(
        rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=panels
    )
    client = (
        ts.groupby("bucket")[["output_tokens_per_s", "in_flight"]].sum(min_count=1).reset_index()
        if not ts.empty
        else pd.DataFrame(columns=["bucket", "output_tokens_per_s", "in_flight"])
    )
    traces = [
        (1, client, "output_tokens_per_s", "output tok/s"),
        (2, client, "in_flight", "in flight"),
        (3, server, "ttft_p50_ms", "client TTFT p50"),
        (3, server, "ttft_p90_ms", "client TTFT p90"),
        (4, server, "queue", "queue"),
        (4, server, "running", "running"),
        (5, server, "kv_cache", "KV use"),
    ]
    for col, label in SPLIT_LINES:  # per-request timings where reported, else the histograms
        for source, values in series_by_source(server, col):
            frame = pd.DataFrame({"bucket": server["bucket"], col: values})
            traces.append((6, frame, col, f"{label} ({source})"))
    for i, (row, frame, col, name) in enumerate(traces):
        if frame.empty or col not in frame or not frame[col].notna().any():
            continue
        fig.add_trace(
            go.Scatter(
                x=frame["bucket"],
                y=frame[col],
                mode="lines+markers",
                line={"color": colour(i)},
                marker={"size": 4},
                name=name,
                hovertemplate=f"%{{x|%H:%M:%S}} UTC: %{{y:.3f}}<extra>{name}</extra>",
            ),
            row=row,
            col=1,
        )
    fig.update_layout(title=title, height=900, hovermode="x unified")
    fig.update_xaxes(title_text="time (UTC)", row=len(panels), col=1)
    return fig


def token_timeline(df: pd.DataFrame, title: str) -> go.Figure:
    """One row per sampled request: a bar from scheduled time to end, a mark per chunk arrival
    (seconds from the run's first scheduled request)."""
    if df.empty:
        return _empty(title)
    spans = df.drop_duplicates("request")
    fig = go.Figure()
    for i, (outcome, g) in enumerate(spans.groupby("outcome", sort=True)):
        width = (g["end_s"] - g["start_s"]).fillna(0.0)
        fig.add_trace(
            go.Bar(
                y=g["request"],
                x=width,
                base=g["start_s"],
                orientation="h",
                marker={"color": colour(0) if outcome == "ok" else colour(i + 1)},
                opacity=0.35,
                name=f"request ({outcome})",
                customdata=np.c_[g["start_s"], g["end_s"]],
                hovertemplate=(
                    "%{y}<br>scheduled %{customdata[0]:.3f} s → end %{customdata[1]:.3f} s"
                    f"<extra>{outcome}</extra>"
                ),
            )
        )
    marks = df.dropna(subset=["chunk_s"])
    fig.add_trace(
        go.Scatter(
            y=marks["request"],
            x=marks["chunk_s"],
            mode="markers",
            marker={
                "symbol": "line-ns-open",
                "size": 10,
                "color": MARK_COLOUR,
                "line": {"width": 1.5, "color": MARK_COLOUR},
            },
            name="chunk arrival",
            customdata=marks["tokens"],
            hovertemplate="%{y}<br>chunk at %{x:.4f} s, %{customdata} token(s)<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        barmode="overlay",
        xaxis_title="seconds from the first scheduled request",
        yaxis={"autorange": "reversed", "type": "category"},
        height=max(320, 18 * spans.shape[0] + 120),
    )
    return fig


def failures(df: pd.DataFrame, title: str) -> go.Figure:
    """Failed requests by kind (count; hover shows the rate)."""
    if df.empty:
        return _empty(title)
    fig = go.Figure(
        go.Bar(
            x=df["kind"],
            y=df["count"],
            customdata=df["rate"] * 100.0,
            hovertemplate="%{x}: %{y:,} (%{customdata:.3f}% of requests)<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title="failure kind", yaxis_title="requests")
    return fig


def frontier(df: pd.DataFrame, title: str, y_label: str) -> go.Figure:
    """Output tokens/s against a latency percentile per (run, level) (analysis.frontier), with
    the bootstrap band as error bars; Pareto points ringed, the knee starred."""
    if df.empty:
        return _empty(title)
    fig = go.Figure()
    for i, (run, g) in enumerate(df.groupby("run", sort=False)):
        g = g.sort_values("output_tokens_per_s")
        fig.add_trace(
            go.Scatter(
                line={"color": colour(i)},
                x=g["output_tokens_per_s"],
                y=g["latency"],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": g["latency_upper"] - g["latency"],
                    "arrayminus": g["latency"] - g["latency_lower"],
                    "thickness": 1,
                },
                mode="lines+markers",
                name=str(run),
                marker={
                    "size": [
                        14 if k else 12 if p else 8
                        for p, k in zip(g["pareto"], g["knee"], strict=True)
                    ],
                    "symbol": ["star" if k else "circle" for k in g["knee"]],
                    "color": colour(i),
                    "line": {"width": [2 if p else 0 for p in g["pareto"]]},
                },
                customdata=np.c_[g["load"], g["request_rate"], g["pareto"], g["n"]],
                hovertemplate=(
                    "%{customdata[0]}<br>%{x:.2f} tokens/s, %{customdata[1]:.3f} req/s"
                    "<br>%{y:.3f} ms (n = %{customdata[3]})<br>Pareto: %{customdata[2]}"
                    "<extra>%{fullData.name}</extra>"
                ),
            )
        )
    fig.update_layout(title=title, xaxis_title="output tokens/s (steady)", yaxis_title=y_label)
    return fig


def nightly(df: pd.DataFrame, title: str, y_label: str) -> go.Figure:
    """A schedule's history (analysis.nightly); change points marked with a diamond and a
    dashed line where the new level starts."""
    if df.empty:
        return _empty(title)
    fig = go.Figure(
        go.Scatter(
            x=df["created_at"],
            y=df["value"],
            mode="lines+markers",
            name="per run",
            customdata=np.c_[df["name"], df["run_id"].str[:8], df["valid"], df["n"]],
            hovertemplate=(
                "%{x|%Y-%m-%d %H:%M} UTC<br>%{y:.3f} ms (n = %{customdata[3]})<br>"
                "%{customdata[0]} %{customdata[1]} (%{customdata[2]})<extra></extra>"
            ),
        )
    )
    cps = df[df["change_point"]]
    if not cps.empty:
        fig.add_trace(
            go.Scatter(
                x=cps["created_at"],
                y=cps["value"],
                mode="markers",
                marker={"symbol": "diamond", "size": 14},
                name="change point",
                hovertemplate="a new level starts here: %{y:.3f} ms<extra></extra>",
            )
        )
        for t in cps["created_at"]:
            fig.add_vline(x=pd.Timestamp(t).to_pydatetime(), line_dash="dash", opacity=0.5)
    fig.update_layout(title=title, xaxis_title="run created (UTC)", yaxis_title=y_label)
    return fig


def live(df: pd.DataFrame, title: str) -> go.Figure:
    """The Live page's chart: the same three panels as `over_time`, kept short."""
    fig = over_time(df, title)
    fig.update_layout(height=480, uirevision="live")
    return fig
