"""The plotly figures the HTML report and the UI (ui/charts.py) both draw, built once here:
latency percentile curves (`percentile_figure`: the tail axis, a log latency axis when the levels
span decades), throughput / in flight / failures over time (`over_time_figure`), the
frontier of throughput against latency (`frontier_figure`) and the timeline of sampled requests
(`timeline_figure`). The page that holds the report's:
analysis/reports/render.py; its PNG versions for CI artifacts: figures.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.reports.tailaxis import set_latency_axis, set_tail_axis

METRIC_TITLES = {
    "ttft_ms": "TTFT from send (ms)",
    "tpot_ms": "TPOT (ms)",
    "itl_ms": "ITL per token (ms)",
    "e2e_ms": "E2E from send (ms)",
}
MARK_COLOUR = "#EB5757"
TIMELINE_COLUMNS = ["request", "outcome", "start_s", "end_s", "chunk_s", "tokens"]
# mid-tone colours that read on both the light and the dark theme; one per series, fixed
PALETTE = ("#4C8BF5", "#F2994A", "#27AE60", "#EB5757", "#9B51E0", "#2D9CDB", "#F2C94C", "#B4656F")
# the curves' frame: one row per (series, percentile); latencies ms, x on the tail axis
CURVE_COLUMNS = ["series", "percentile", "x", "value_ms", "lo_ms", "hi_ms", "n"]
EMPTY_NOTE = "no samples"


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def empty_figure(title: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, annotations=[{"text": EMPTY_NOTE, "showarrow": False}])
    return fig


def percentile_figure(df: pd.DataFrame, title: str, y_label: str) -> go.Figure:
    """One line per `series` (value_ms against x), its 95% band shaded; x the tail axis labelled
    p50, p90, p99, p99.9; y on a log scale when the series span more than a decade (the band's
    edges included). `df` has CURVE_COLUMNS (ui.data.derive.curve, `report_curves`)."""
    if df.empty:
        return empty_figure(title)
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
    set_tail_axis(fig, title="percentile (tail axis: 1 / (1 - p))", max_x=float(df["x"].max()))
    values = pd.concat([df["value_ms"], df["lo_ms"], df["hi_ms"]])
    set_latency_axis(fig, values, title=y_label)
    fig.update_layout(title=title, hovermode="closest", legend_title=None)
    return fig


def report_curves(report: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """The report's percentile curves per metric in CURVE_COLUMNS (series "level N", or
    "level N REGION" for one region of several)."""
    curves = pd.DataFrame(report["curves"])
    out: dict[str, pd.DataFrame] = {}
    if curves.empty:
        return out
    for metric, sub in curves.groupby("metric", sort=False):
        series = [
            f"level {lv}" + ("" if rg == "all" else f" {rg}")
            for lv, rg in zip(sub["level"], sub["region"], strict=True)
        ]
        frame = sub.rename(columns={"value": "value_ms", "lower": "lo_ms", "upper": "hi_ms"})
        frame = frame.assign(series=series)
        if "n" not in frame:
            frame["n"] = np.nan
        out[str(metric)] = frame[CURVE_COLUMNS].reset_index(drop=True)
    return out


def _curve_figs(report: Mapping[str, Any]) -> list[go.Figure]:
    return [
        percentile_figure(
            frame,
            f"{METRIC_TITLES.get(metric, metric)} — percentile spectrum (band: 95% bootstrap)",
            "ms",
        )
        for metric, frame in report_curves(report).items()
    ]


def frontier_figure(df: pd.DataFrame, title: str, y_label: str) -> go.Figure:
    """Output tokens/s against a latency percentile per (run, level) (analysis.stats.frontier), with
    the bootstrap band as error bars; Pareto points ringed, the knee starred."""
    if df.empty:
        return empty_figure(title)
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


def report_frontier(report: Mapping[str, Any]) -> pd.DataFrame:
    """The report's frontier points in `frontier_figure`'s columns: one run (the report's),
    Pareto and knee flags from the report, `load` as "kind value"."""
    fr = report["frontier"]
    pts = pd.DataFrame(fr["points"])
    if pts.empty:
        return pts
    pareto = {int(p["level"]) for p in fr.get("pareto") or []}
    return pts.assign(
        run=str((report.get("run") or {}).get("name") or "run"),
        pareto=pts["level"].astype(int).isin(pareto),
        knee=pts["level"] == fr.get("knee_level"),
        load=[
            f"{k or ''} {v:g}" if isinstance(v, int | float) else str(k or "")
            for k, v in zip(pts["kind"], pts["value"], strict=True)
        ],
    )


def _frontier_fig(report: Mapping[str, Any]) -> go.Figure | None:
    pts = report_frontier(report)
    if pts.empty:
        return None
    fr = report["frontier"]
    return frontier_figure(
        pts, f"Throughput vs p{fr['percentile']:g} {fr['metric']}", "ms (steady window)"
    )


OVER_TIME_PANELS = ("output tokens/s", "in flight (mean)", "failed requests/s")


def over_time_figure(ts: pd.DataFrame, title: str) -> go.Figure:
    """Three stacked panels per region: output tokens/s, mean in flight, failed/s, against each
    bucket's start (UTC); `ts` as analysis.store.buckets.timeseries with arrival throughput
    (analysis.stats.throughput); failed/s from `failed_per_s`."""
    fig = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06, subplot_titles=OVER_TIME_PANELS
    )
    if ts.empty:
        fig.update_layout(title=title)
        return fig
    for i, (region, g) in enumerate(ts.groupby("region", sort=True)):
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


def _timeseries_fig(report: Mapping[str, Any]) -> go.Figure | None:
    ts = pd.DataFrame(report["timeseries"]["rows"])
    if ts.empty:
        return None
    return over_time_figure(
        ts, f"Over time per region ({report['timeseries']['bucket_s']:g} s buckets)"
    )


def timeline_figure(df: pd.DataFrame, title: str) -> go.Figure:
    """One row per sampled request: a bar from scheduled time to end, a mark per chunk arrival
    (seconds from the run's first scheduled request). `df`: one row per chunk with request,
    outcome, start_s, end_s, chunk_s (NaN for a request without chunks), tokens."""
    if df.empty:
        return empty_figure(title)
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


def report_timeline(report: Mapping[str, Any]) -> pd.DataFrame:
    """The report's sampled requests (report.timeline_sample) in `timeline_figure`'s rows:
    end and chunk arrivals moved from "s after the schedule" to the run's axis."""
    rows = []
    for r in report["timeline"]:
        start = float(r["scheduled_s"])
        end = start + float(r["end_s"]) if r.get("end_s") is not None else np.nan
        base = {
            "request": f"#{r['idx']} {r['region']} L{r['level']}",
            "outcome": r["outcome"],
            "start_s": start,
            "end_s": end,
        }
        chunks = r.get("chunk_s") or []
        rows += [{**base, "chunk_s": start + c, "tokens": np.nan} for c in chunks]
        if not chunks:
            rows.append({**base, "chunk_s": np.nan, "tokens": 0})
    return pd.DataFrame(rows, columns=TIMELINE_COLUMNS)


def _timeline_fig(report: Mapping[str, Any]) -> go.Figure | None:
    tl = report_timeline(report)
    if tl.empty:
        return None
    return timeline_figure(tl, "Sample of requests: bar scheduled → end, marks = chunk arrivals")
