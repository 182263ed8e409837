"""The report's server and cost sections as HTML, and one plotly figure: client throughput,
in-flight and TTFT above the server's queue, running requests, KV use and own TTFT/queue time
on one shared time axis (the report's buckets); the diagnosis, per-level tables, break-even.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any, NamedTuple

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.stats.server_diagnosis import split_sources
from analysis.stats.server_split import SPLIT_LINES, series_by_source

# The client-and-server figure's panels, top to bottom: the report's and the UI's (ui.charts)
CLIENT_SERVER_PANELS = (
    "client output tokens/s",
    "client in flight",
    "client TTFT from send (ms)",
    "server queue / running",
    "server KV-cache use (0-1)",
    "server TTFT = queue + prefill, mean (ms), by source",
)


class PanelSeries(NamedTuple):
    """One line of the client-and-server figure: its place in the full list (`order`, a colour
    index), its panel row (1-based), the frame and column holding it, the trace's name."""

    order: int
    row: int
    frame: pd.DataFrame
    column: str
    name: str


def client_totals(ts: pd.DataFrame) -> pd.DataFrame:
    """Output tokens/s and in-flight summed over regions per time bucket."""
    if ts.empty:
        return pd.DataFrame(columns=["bucket", "output_tokens_per_s", "in_flight"])
    return ts.groupby("bucket")[["output_tokens_per_s", "in_flight"]].sum(min_count=1).reset_index()


def client_server_series(
    client: pd.DataFrame, ttft: pd.DataFrame, server: pd.DataFrame
) -> list[PanelSeries]:
    """The lines of the client-and-server figure that have data: `client` as `client_totals`,
    `ttft` the client's TTFT p50/p90 per bucket, `server` the server series (server_series:
    scraped gauges, and the server's TTFT split by source, one line per source)."""
    lines = [
        (1, client, "output_tokens_per_s", "output tok/s"),
        (2, client, "in_flight", "in flight"),
        (3, ttft, "ttft_p50_ms", "client TTFT p50"),
        (3, ttft, "ttft_p90_ms", "client TTFT p90"),
        (4, server, "queue", "queue"),
        (4, server, "running", "running"),
        (5, server, "kv_cache", "KV use"),
    ]
    for col, label in SPLIT_LINES:  # per-request timings where reported, else the histograms
        for source, values in series_by_source(server, col):
            frame = pd.DataFrame({"bucket": server["bucket"], col: values})
            lines.append((6, frame, col, f"{label} ({source})"))
    return [
        PanelSeries(i, row, frame, col, name)
        for i, (row, frame, col, name) in enumerate(lines)
        if not frame.empty and col in frame and frame[col].notna().any()
    ]


def server_fig(report: Mapping[str, Any]) -> go.Figure | None:
    srv = report.get("server") or {}
    rows = pd.DataFrame(srv.get("rows") or [])
    ttft = pd.DataFrame(srv.get("client_ttft") or [])
    if rows.empty:
        return None
    ts = pd.DataFrame(report["timeseries"]["rows"])
    for frame in (rows, ttft, ts):
        if not frame.empty:
            frame["bucket"] = pd.to_datetime(frame["bucket"], utc=True)
    fig = make_subplots(
        rows=len(CLIENT_SERVER_PANELS),
        cols=1,
        shared_xaxes=True,
        subplot_titles=CLIENT_SERVER_PANELS,
    )
    for s in client_server_series(client_totals(ts), ttft, rows):
        fig.add_trace(
            go.Scatter(x=s.frame["bucket"], y=s.frame[s.column], mode="lines", name=s.name),
            row=s.row,
            col=1,
        )
    fig.update_layout(
        title=f"Client and server over time ({report['timeseries']['bucket_s']:g} s buckets)",
        height=900,
    )
    return fig


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"


def server_html(report: Mapping[str, Any]) -> str:
    """Diagnosis and per-level server table; a note when the run scraped nothing."""
    srv = report.get("server") or {}
    diag = srv.get("diagnosis") or {}
    parts = ["<h2>Where the time went</h2>"]
    parts.append(f"<p><b>{html.escape(str(diag.get('verdict', 'unknown')))}</b>: ")
    parts.append(html.escape(str(diag.get("sentence", ""))) + "</p>")
    found = srv.get("metrics") or {}
    if found:
        parts.append(
            "<p>server series: "
            + ", ".join(
                f"{html.escape(k)} = <code>{html.escape(v)}</code>" for k, v in found.items()
            )
            + "</p>"
        )
    levels = srv.get("levels") or {}
    if levels:
        head = [
            "level",
            "queue mean",
            "queue max",
            "running mean",
            "KV use",
            "server TTFT ms",
            "server queue ms",
            "server prefill+first step ms",
            "split from",
        ]
        body = "".join(
            "<tr>"
            + "".join(
                f"<td>{c}</td>"
                for c in (
                    lv,
                    _fmt(s.get("queue_mean")),
                    _fmt(s.get("queue_max"), 0),
                    _fmt(s.get("running_mean")),
                    _fmt(s.get("kv_cache_mean"), 2),
                    _fmt(s.get("server_ttft_ms")),
                    _fmt(s.get("server_queue_ms")),
                    _fmt(s.get("server_prefill_ms")),
                    html.escape(split_sources(s)),
                )
            )
            + "</tr>"
            for lv, s in sorted(levels.items(), key=lambda kv: int(kv[0]))
        )
        parts.append(
            "<table><tr>"
            + "".join(f"<th>{h}</th>" for h in head)
            + f"</tr>{body}</table>"
            + "<p>means over each level's steady span; the server's TTFT split from the "
            "requests' own server timings where they report it, else from its histograms</p>"
        )
    return "".join(parts)


def _usd(x: Any, digits: int = 4) -> str:
    return "—" if x is None else f"${float(x):,.{digits}f}"


def cost_html(report: Mapping[str, Any]) -> str:
    """What the run cost, per million tokens per level, and the break-even sentence."""
    c = report.get("cost") or {}
    if not c.get("basis"):
        return (
            "<h2>Cost</h2><p>No price known: set [cost] input_per_mtok/output_per_mtok, a "
            "priced preset, or gpu_hourly_usd and gpus.</p>"
        )
    p = c["prices"]
    per_token = ""
    if p.get("output_per_mtok") is not None:
        per_token = (
            f"{_usd(p['input_per_mtok'], 3)} / {_usd(p['output_per_mtok'], 3)} per million "
            "input / output tokens"
        )
        if p.get("as_of"):
            per_token += f" (as of {p['as_of']}, {html.escape(str(p['source']))})"
    if c["basis"] == "self-hosted":
        price = f"{_usd(p['gpu_hourly_usd'], 2)} per GPU-hour x {p['gpus']} GPU(s)"
        if per_token:
            price += f"; per-token alternative {per_token}"
    else:
        price = per_token
    parts = [
        "<h2>Cost</h2>",
        f"<p>{html.escape(c['basis'])}: {price}. This run cost "
        f"<b>{_usd(c['total_usd'])}</b> for {c['input_tokens']:,.0f} input and "
        f"{c['output_tokens']:,.0f} output tokens billed ({_usd(c['usd_per_mtok_output_run'], 3)} "
        "per million output tokens overall).</p>",
    ]
    head = ["level", "out tok/s", "in tok/s", "$/M output", "$/M input", "per-token $/M output"]
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{v}</td>"
            for v in (
                lv["level"],
                _fmt(lv["output_tokens_per_s"]),
                _fmt(lv["input_tokens_per_s"]),
                _usd(lv.get("usd_per_mtok_output"), 3),
                _usd(lv.get("usd_per_mtok_input"), 3),
                _usd(lv.get("per_token_usd_per_mtok_output"), 3),
            )
        )
        + "</tr>"
        for lv in c["levels"]
    )
    parts.append(
        "<table><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + f"</tr>{body}</table><p>at each level's measured throughput (steady window); "
        "self-hosted: the whole hourly price charged to these tokens; per-token $/M output "
        "includes this load's input tokens</p>"
    )
    be = c.get("break_even")
    if be:
        parts.append(f"<p><b>Break-even</b>: {html.escape(be['sentence'])}.</p>")
    return "".join(parts)


def regions_html(report: Mapping[str, Any]) -> str:
    """Per region: TTFT, network round trip, server time and connection set-up, and clocks."""
    rows = report.get("regions_network") or []
    if not rows:
        return ""

    def trio(d: Mapping[str, Any] | None) -> str:
        d = d or {}
        return " / ".join(_fmt(d.get(k)) for k in ("p50", "p90", "p99"))

    head = [
        "region",
        "ok",
        "TTFT p50/p90/p99",
        "network RTT",
        "server time p50/p90/p99",
        "server time from",
        "server-reported queue / prefill p50",
        "conn set-up (probe)",
        "conn set-up per request p50/p90/p99",
        "clock offset ms",
        "clock ± ms",
    ]
    body = []
    for r in rows:
        off = r.get("clock_offset_ms")
        marked = r.get("clock_suspect_shards") or []
        body.append(
            "<tr>"
            + "".join(
                f"<td>{c}</td>"
                for c in (
                    html.escape(str(r["region"])),
                    r["requests_ok"],
                    trio(r["ttft_ms"]),
                    _fmt(r["network_rtt_ms"], 2),
                    trio(r["server_time_ms"]),
                    html.escape(str(r.get("server_time_source") or "—")),
                    " / ".join(
                        _fmt((r.get(k) or {}).get("p50"))
                        for k in ("server_queue_ms", "server_prefill_ms")
                    ),
                    _fmt(r["connection_setup_ms"], 2),
                    trio(r["connection_setup_per_request_ms"]),
                    "—" if not off else f"{off[0]:+.2f} … {off[1]:+.2f}",
                    _fmt(r["clock_uncertainty_ms"], 3)
                    + (f" <b>uncertain: {html.escape(', '.join(marked))}</b>" if marked else ""),
                )
            )
            + "</tr>"
        )
    return (
        "<h2>Network and server time per region</h2><table><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr>"
        + "".join(body)
        + "</table><p>ms; steady-phase ok requests; server time = the server's own queue + "
        "prefill per request where every request reports both, else TTFT from send - the "
        "region's probe round trip; times across regions are on the reference clock, each "
        "shard to within its clock uncertainty</p>"
    )
