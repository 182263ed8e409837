"""Plotly figure builders: pure functions from analysis results (frames from ui.data/) to figures.
No SQL, no Streamlit. Colours are left to the theme (`st.plotly_chart(theme="streamlit")`) so
light and dark both read; hover shows exact values with units.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.reports.plots import (
    colour,
    empty_figure,
    frontier_figure,
    over_time_figure,
    percentile_figure,
    timeline_figure,
)
from analysis.reports.render_server import CLIENT_SERVER_PANELS, client_server_series, client_totals
from analysis.reports.tailaxis import set_latency_axis

FIRST_SERVER_PANEL = 3  # CLIENT_SERVER_PANELS' rows after this one are the server's own
# one builder each for the report and the UI (analysis.reports.plots)
percentile_curves = percentile_figure
over_time = over_time_figure
_empty = empty_figure
frontier = frontier_figure
token_timeline = timeline_figure


def client_and_server(ts: pd.DataFrame, server: pd.DataFrame, title: str) -> go.Figure:
    """The client's throughput, in-flight and TTFT above the server's queue, running requests,
    KV use and its own TTFT / queue time, on one time axis (the same UTC buckets)."""
    panels = CLIENT_SERVER_PANELS
    fig = make_subplots(
        rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=panels
    )
    # `server` (ui.data.run.server_rows) carries the client's TTFT per bucket too
    for s in client_server_series(client_totals(ts), server, server):
        fig.add_trace(
            go.Scatter(
                x=s.frame["bucket"],
                y=s.frame[s.column],
                mode="lines+markers",
                line={"color": colour(s.order)},
                marker={"size": 4},
                name=s.name,
                hovertemplate=f"%{{x|%H:%M:%S}} UTC: %{{y:.3f}}<extra>{s.name}</extra>",
            ),
            row=s.row,
            col=1,
        )
    fig.update_layout(title=title, height=900, hovermode="x unified")
    fig.update_xaxes(title_text="time (UTC)", row=len(panels), col=1)
    return fig


IMAGE_WIDTH_PX = 1200
IMAGE_MIME = {"png": "image/png", "svg": "image/svg+xml"}


def static_image(fig: go.Figure, fmt: Literal["png", "svg"]) -> bytes:
    """`fig` as a PNG (at twice 1200 px wide) or an SVG, drawn by plotly.js itself in headless
    Chromium (kaleido, which runs the installed /usr/bin/chromium; nothing is downloaded), in
    plotly's light template since the app's theme lives in the browser."""
    height = int(fig.layout.height or 520)
    scale = 2 if fmt == "png" else 1
    for attempt in range(1, IMAGE_ATTEMPTS + 1):
        try:
            return bytes(fig.to_image(format=fmt, width=IMAGE_WIDTH_PX, height=height, scale=scale))
        except Exception as exc:  # kaleido raises its own private error types
            if attempt == IMAGE_ATTEMPTS or PAGE_NOT_LOADED not in str(exc):
                raise
    raise AssertionError("unreachable")


# kaleido's tab can be asked to draw before its page has defined the drawing code (seen on a
# loaded 2-core host, once in a whole make test: "ReferenceError: kaleido_scopes is not defined");
# a fresh attempt loads the page again. Any other error is the figure's, and is raised at once.
PAGE_NOT_LOADED = "kaleido_scopes is not defined"
IMAGE_ATTEMPTS = 3


def timeslices(slices: pd.DataFrame, server: pd.DataFrame, label: str, title: str) -> go.Figure:
    """A metric per window over the run (analysis.stats.timeslices: p50/p90/p99, log scale when
    they span decades), the requests sent per window that succeeded and failed, and beneath,
    when the run has them, the server's own series on the same windows (`server` as
    ui.data.run.server_rows at that window): queue / running, KV use, server TTFT."""
    lines = client_server_series(client_totals(pd.DataFrame()), server, server)
    own = [s for s in lines if s.row > FIRST_SERVER_PANEL]
    rows = sorted({s.row for s in own})
    panels = [CLIENT_SERVER_PANELS[r - 1] for r in rows]
    titles = (f"{label} per window (ms)", "requests per window", *panels)
    fig = make_subplots(
        rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=titles
    )
    if slices.empty:
        fig.update_layout(title=title, annotations=[{"text": "no requests", "showarrow": False}])
        return fig
    for i, col in enumerate(("p50_ms", "p90_ms", "p99_ms")):
        fig.add_trace(
            go.Scatter(
                x=slices["window"],
                y=slices[col],
                mode="lines+markers",
                line={"color": colour(i)},
                marker={"size": 4},
                name=f"{label} {col.removesuffix('_ms')}",
                customdata=slices["ok"],
                hovertemplate="%{x|%H:%M:%S} UTC: %{y:.3f} ms (n = %{customdata})<extra></extra>",
            ),
            row=1,
            col=1,
        )
    set_latency_axis(
        fig, slices[["p50_ms", "p90_ms", "p99_ms"]].to_numpy().ravel(), title="ms", row=1
    )
    for i, (col, name) in enumerate((("ok", "ok"), ("failed", "failed"))):
        fig.add_trace(
            go.Bar(x=slices["window"], y=slices[col], name=name, marker={"color": colour(i + 3)}),
            row=2,
            col=1,
        )
    for s in own:
        fig.add_trace(
            go.Scatter(
                x=s.frame["bucket"],
                y=s.frame[s.column],
                mode="lines+markers",
                line={"color": colour(s.order)},
                marker={"size": 4},
                name=s.name,
                hovertemplate=f"%{{x|%H:%M:%S}} UTC: %{{y:.3f}}<extra>{s.name}</extra>",
            ),
            row=3 + rows.index(s.row),
            col=1,
        )
    fig.update_layout(
        title=title, height=320 + 200 * len(titles), barmode="stack", hovermode="x unified"
    )
    fig.update_xaxes(title_text="window start, by send time (UTC)", row=len(titles), col=1)
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


def nightly(df: pd.DataFrame, title: str, y_label: str) -> go.Figure:
    """A schedule's history (analysis.verdicts.nightly); change points marked with a diamond and a
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
