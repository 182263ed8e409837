"""Rendering a report (analysis/reports/report.py) as one self-contained HTML file: plotly with its
JavaScript inlined (no CDN, no network). PNG figures for CI artifacts: analysis/reports/figures.py.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from analysis.reports.render_server import cost_html, regions_html, server_fig, server_html
from analysis.reports.summary import (
    CLIENT_VS_SERVER,
    client_vs_server_rows,
    connection_cell,
    search_line,
)
from analysis.store.probe import probe_rows

TICKS = [
    (0.0, "p0"),
    (50.0, "p50"),
    (90.0, "p90"),
    (99.0, "p99"),
    (99.9, "p99.9"),
    (99.99, "p99.99"),
]
METRIC_TITLES = {
    "ttft_ms": "TTFT from send (ms)",
    "tpot_ms": "TPOT (ms)",
    "itl_ms": "ITL per token (ms)",
    "e2e_ms": "E2E from send (ms)",
}
_OUTCOME_COLOURS = {"ok": "#2b8a3e"}
_PALETTE = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def _rgba(hex_colour: str, alpha: float) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _x(q: float) -> float:
    return 1.0 / (1.0 - q / 100.0)


def _curve_figs(report: Mapping[str, Any]) -> list[go.Figure]:
    curves = pd.DataFrame(report["curves"])
    figs: list[go.Figure] = []
    if curves.empty:
        return figs
    for metric, sub in curves.groupby("metric", sort=False):
        fig = go.Figure()
        for i, ((level, region), g) in enumerate(sub.groupby(["level", "region"])):
            name = f"level {level}" + ("" if region == "all" else f" {region}")
            dash = "solid" if region == "all" else "dot"
            colour = _PALETTE[i % len(_PALETTE)]
            fig.add_trace(
                go.Scatter(
                    x=g["x"],
                    y=g["upper"],
                    mode="lines",
                    line={"width": 0},
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=g["x"],
                    y=g["lower"],
                    mode="lines",
                    line={"width": 0},
                    fill="tonexty",
                    fillcolor=_rgba(colour, 0.18),
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=g["x"],
                    y=g["value"],
                    mode="lines",
                    name=name,
                    line={"dash": dash, "color": colour},
                    customdata=g["percentile"],
                    hovertemplate="p%{customdata:.3f}: %{y:.2f} ms",
                )
            )
        fig.update_xaxes(
            type="log",
            tickvals=[_x(q) for q, _ in TICKS],
            ticktext=[t for _, t in TICKS],
            title="percentile",
        )
        fig.update_layout(
            title=f"{METRIC_TITLES.get(str(metric), metric)} — percentile "
            "spectrum (band: 95% bootstrap)",
            yaxis_title="ms",
            height=420,
        )
        figs.append(fig)
    return figs


def _frontier_fig(report: Mapping[str, Any]) -> go.Figure | None:
    fr = report["frontier"]
    pts = pd.DataFrame(fr["points"])
    if pts.empty:
        return None
    err = {
        "type": "data",
        "symmetric": False,
        "array": (pts["latency_upper"] - pts["latency"]).tolist(),
        "arrayminus": (pts["latency"] - pts["latency_lower"]).tolist(),
    }
    fig = go.Figure(
        go.Scatter(
            x=pts["output_tokens_per_s"],
            y=pts["latency"],
            error_y=err,
            mode="lines+markers",
            text=[
                f"level {lv}: {k} {v}"
                for lv, k, v in zip(pts["level"], pts["kind"], pts["value"], strict=True)
            ],
            name="levels",
        )
    )
    if fr.get("knee_level") is not None:
        k = pts[pts["level"] == fr["knee_level"]]
        fig.add_trace(
            go.Scatter(
                x=k["output_tokens_per_s"],
                y=k["latency"],
                mode="markers",
                marker={"size": 14, "symbol": "x"},
                name="knee",
            )
        )
    fig.update_layout(
        title=f"Throughput vs p{fr['percentile']:g} {fr['metric']}",
        xaxis_title="output tokens/s (steady window)",
        yaxis_title="ms",
        height=420,
    )
    return fig


def _timeseries_fig(report: Mapping[str, Any]) -> go.Figure | None:
    ts = pd.DataFrame(report["timeseries"]["rows"])
    if ts.empty:
        return None
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        subplot_titles=("output tokens/s", "in flight", "errors/s"),
    )
    for region, g in ts.groupby("region"):
        for row, col in ((1, "output_tokens_per_s"), (2, "in_flight"), (3, "errors_per_s")):
            y = (
                g[col]
                if g[col].notna().any()
                else (
                    g["request_tokens_per_s"]
                    if col == "output_tokens_per_s"
                    else g["failed_per_s"]
                    if col == "errors_per_s"
                    else g[col]
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=g["bucket"],
                    y=y,
                    mode="lines",
                    name=str(region),
                    legendgroup=str(region),
                    showlegend=row == 1,
                ),
                row=row,
                col=1,
            )
    fig.update_layout(
        title=f"Over time per region ({report['timeseries']['bucket_s']:g} s buckets)", height=640
    )
    return fig


def _timeline_fig(report: Mapping[str, Any]) -> go.Figure | None:
    tl = report["timeline"]
    if not tl:
        return None
    fig = go.Figure()
    for i, r in enumerate(tl):
        y = f"{i:02d} {r['region']}"
        start = r["scheduled_s"]
        end = start + (r["end_s"] if r["end_s"] is not None else 0.0)
        colour = _OUTCOME_COLOURS.get(r["outcome"], "#c92a2a")
        fig.add_trace(
            go.Scatter(
                x=[start, end],
                y=[y, y],
                mode="lines",
                line={"width": 6, "color": colour},
                showlegend=False,
                hovertext=f"{r['outcome']} level {r['level']}",
            )
        )
        if r["chunk_s"]:
            fig.add_trace(
                go.Scatter(
                    x=[start + c for c in r["chunk_s"]],
                    y=[y] * len(r["chunk_s"]),
                    mode="markers",
                    marker={"size": 4, "color": "#1c7ed6"},
                    showlegend=False,
                )
            )
    fig.update_layout(
        title="Sample of requests: bar scheduled → end, dots = chunk arrivals",
        xaxis_title="s from run start",
        height=max(300, 18 * len(tl)),
    )
    return fig


def _table(rows: list[list[Any]], head: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(c: Any) -> str:
    if c is None:
        return "—"
    if isinstance(c, float):
        return f"{c:,.2f}"
    return str(c)


def _summary_rows(report: Mapping[str, Any]) -> list[list[Any]]:
    rows = []
    for lv in report["summary"]["levels"]:
        rows.append(
            [
                lv["level"],
                f"{lv.get('kind') or ''} {_fmt(lv.get('value'))}",
                lv.get("achieved"),
                lv["requests_ok"],
                lv["requests_failed"],
                lv["request_rate"],
                lv["output_tokens_per_s"],
                *(
                    " / ".join(_fmt(lv[k][p]) for p in ("p50", "p90", "p99"))
                    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
                ),
                connection_cell(lv.get("connections") or {}),
                (lv.get("connections") or {}).get("resent"),
                lv.get("between_levels") or "—",
                lv.get("other_levels_in_flight_max"),
                "FLAGGED: " + "; ".join(lv["flags"]) if lv.get("flags") else "ok",
            ]
        )
    return rows


def _client_vs_server(report: Mapping[str, Any]) -> str:
    """The "client vs server" section, or "" when the server reported no timings."""
    rows = client_vs_server_rows(report["summary"])
    if not rows:
        return ""
    return (
        "<h2>Client vs server</h2><p>The server's own timings against the client's, ms: p50 "
        "over ok steady requests the server timed; server prefill includes the queue time "
        "where the server reports one; server ITL = its decode time / (tokens - 1); gap = "
        "client p50 - server p50 (network, client and any queue the server does not report)</p>"
        + _table(
            [
                [
                    r["level"],
                    r["region"],
                    *(r.get(k) for _, k in CLIENT_VS_SERVER),
                    max(r.get("ttft_n") or 0, r.get("itl_n") or 0),
                ]
                for r in rows
            ],
            ["level", "region", *(h for h, _ in CLIENT_VS_SERVER), "requests"],
        )
    )


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px}
.banner{background:#c92a2a;color:#fff;padding:1em;font-size:1.3em;font-weight:bold}
.ok{background:#2b8a3e;color:#fff;padding:.5em}"""


def render_html(report: Mapping[str, Any]) -> str:
    """The whole report as one HTML document; plotly.js is inlined once (no external URL)."""
    run = report["run"]
    v = report["validity"]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>peakload report "
        f"{html.escape(str(run['name']))}</title><style>{_CSS}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>"
    ]
    if v["valid"] is False:
        reasons = "; ".join(html.escape(str(r)) for r in v["invalid_reasons"]) or "see flags"
        parts.append(
            f"<div class='banner'>INVALID RUN — the generator, not the server, may "
            f"have shaped these numbers: {reasons}</div>"
        )
    elif v["valid"] is None:
        parts.append(
            "<div class='banner'>Validity unknown: the run did not finish its self-check</div>"
        )
    parts.append(f"<h1>{html.escape(str(run['name']))}</h1>")
    parts.append(
        _table(
            [
                [k, run[k]]
                for k in (
                    "run_id",
                    "target_url",
                    "model",
                    "api",
                    "mode",
                    "started_at",
                    "duration_s",
                    "requests",
                    "errors",
                )
            ]
            + [["status", v["status"]]],
            ["run", ""],
        )
    )
    parts.append(
        "<h2>Test matrix</h2>"
        + _table([[k, val] for k, val in sorted(report["labels"].items())], ["label", "value"])
    )
    parts.append(
        "<h2>Summary per level</h2><p>latencies ms p50 / p90 / p99, ok requests in "
        "the steady phase; TTFT from send; ITL per token; new conn: share of sent requests "
        "that opened a new connection · its set-up ms p50 / p99; re-sent: requests sent again "
        f"on a new connection after a reused one died (run total: "
        f"{_fmt(report['summary'].get('resent'))}). Throughput from arrivals: output "
        "tokens that arrived inside the level's steady window (a chunk of k tokens counts k at "
        "its arrival) and ok requests that completed inside it, / window, every shard and "
        "region pooled. Between levels: drain (the level's requests ended before the next "
        "began), cancel (cut at its end, partial tokens kept) or overlap (the next level ran "
        "beside them: see other levels' requests in flight)</p>"
    )
    parts.append(
        _table(
            _summary_rows(report),
            [
                "level",
                "configured",
                "achieved",
                "ok",
                "failed",
                "req/s",
                "out tok/s",
                "TTFT",
                "TPOT",
                "ITL",
                "E2E",
                "new conn",
                "re-sent",
                "between levels",
                "other levels in flight (max)",
                "load delivered",
            ],
        )
    )
    parts.append(_client_vs_server(report))
    search = search_line(report["summary"])
    if search:
        parts.append(f"<p><b>{html.escape(search)}</b></p>")
    if report["sla"]:
        parts.append(
            "<h2>SLA verdicts</h2>"
            + _table(
                [
                    [
                        c["claim"],
                        c["n"],
                        c["exceedances"],
                        c["observed"],
                        c["exceed_upper"],
                        c["verdict"],
                    ]
                    for c in report["sla"]
                ],
                ["claim", "n", "exceedances", "observed", "exceedance upper bound", "verdict"],
            )
        )
    if report["error_rates"]:
        parts.append(
            "<h2>Failures</h2>"
            + _table(
                [[k, e["count"], e["rate"]] for k, e in report["error_rates"].items()],
                ["kind", "count", "rate"],
            )
        )
    if "server" in report:
        parts.append(server_html(report))
    if "cost" in report:
        parts.append(cost_html(report))
    if "regions_network" in report:
        parts.append(regions_html(report))
    figs = [
        *_curve_figs(report),
        _frontier_fig(report),
        _timeseries_fig(report),
        server_fig(report) if "server" in report else None,
        _timeline_fig(report),
    ]
    for fig in figs:
        if fig is not None:
            parts.append(
                fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False)
            )
    flag_rows = [
        [
            s["shard_id"],
            s["region"],
            s["state"],
            s["valid"],
            s["clock_uncertainty_ms"],
            s["start_skew_ms"],
            "; ".join(s["invalid_reasons"]),
        ]
        for s in v["shards"]
    ]
    if flag_rows:
        parts.append(
            "<h2>Shards and validity flags</h2>"
            + _table(
                flag_rows,
                ["shard", "region", "state", "valid", "clock ± ms", "start skew ms", "reasons"],
            )
        )
    probe = report.get("probe")
    if probe:
        parts.append(
            f"<h2>Parameter probe ({html.escape(str(probe.get('probed_at', '')))})</h2>"
            + _table(probe_rows(probe), ["parameter", "verdict", "detail"])
        )
    parts.append("</body></html>")
    return "".join(parts)
