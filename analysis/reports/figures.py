"""PNG figures of a report (analysis/reports/report.py) for CI artifacts: percentile spectra,
frontier, time series per region, and a timeline of sampled requests (matplotlib, Agg backend).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from analysis.reports.plots import METRIC_TITLES, report_curves
from analysis.reports.tailaxis import TAIL_LABELS, spans_decades, tail_label, tail_ticks, tail_x


def write_pngs(report: Mapping[str, Any], out_dir: str | Path) -> list[Path]:
    """PNG figures (percentile spectra, frontier, time series, client beside server when the
    run scraped server metrics, timeline); returns their paths."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for metric, curves in report_curves(report).items():
        if not pd.to_numeric(curves["value_ms"], errors="coerce").notna().any():
            continue  # no sample (e.g. ITL of a run imported without per-token times)
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, g in curves.groupby("series", sort=False):
            line = ax.plot(g["x"], g["value_ms"], label=str(name))
            ax.fill_between(g["x"], g["lo_ms"], g["hi_ms"], alpha=0.2, color=line[0].get_color())
        ax.set_xscale("log")
        ticks = tail_ticks(float(curves["x"].max()))
        ax.set_xticks([tail_x(q) for q in ticks], [tail_label(q) for q in ticks])
        ax.set_xlim(1.0, max(tail_x(TAIL_LABELS[-1]), float(curves["x"].max())) * 1.05)
        log = spans_decades(pd.concat([curves["lo_ms"], curves["hi_ms"]]))
        ax.set_yscale("log" if log else "linear")
        ax.set_ylabel("ms, log scale" if log else "ms")
        ax.set_title(METRIC_TITLES.get(metric, metric))
        ax.legend(fontsize=7)
        written.append(_save(fig, d / f"percentiles_{metric}.png"))
    pts = pd.DataFrame(report["frontier"]["points"])
    if not pts.empty:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.errorbar(
            pts["output_tokens_per_s"],
            pts["latency"],
            yerr=[pts["latency"] - pts["latency_lower"], pts["latency_upper"] - pts["latency"]],
            marker="o",
        )
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel("ms")
        ax.set_title(
            f"frontier: p{report['frontier']['percentile']:g} {report['frontier']['metric']}"
        )
        written.append(_save(fig, d / "frontier.png"))
    ts = pd.DataFrame(report["timeseries"]["rows"])
    if not ts.empty:
        fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
        for region, g in ts.groupby("region"):
            for ax, col in zip(
                axes, ("output_tokens_per_s", "in_flight", "errors_per_s"), strict=True
            ):
                ax.plot(pd.to_datetime(g["bucket"]), g[col], label=str(region))
                ax.set_ylabel(col)
        axes[0].legend(fontsize=7)
        written.append(_save(fig, d / "timeseries.png"))
    srv = pd.DataFrame((report.get("server") or {}).get("rows") or [])
    if not srv.empty:
        written.append(_client_server_png(ts, srv, d / "client_server.png"))
    tl = report["timeline"]
    if tl:
        fig, ax = plt.subplots(figsize=(9, max(3.0, 0.22 * len(tl))))
        for i, r in enumerate(tl):
            end = r["scheduled_s"] + (r["end_s"] or 0.0)
            ax.plot(
                [r["scheduled_s"], end],
                [i, i],
                lw=4,
                color="#2b8a3e" if r["outcome"] == "ok" else "#c92a2a",
            )
            ax.plot(
                [r["scheduled_s"] + c for c in r["chunk_s"]],
                [i] * len(r["chunk_s"]),
                ".",
                ms=3,
                color="#1c7ed6",
            )
        ax.set_xlabel("s from run start")
        ax.set_title("sample of requests: scheduled → end, dots = chunks")
        written.append(_save(fig, d / "timeline.png"))
    return written


def _client_server_png(ts: pd.DataFrame, srv: pd.DataFrame, path: Path) -> Path:
    """Client throughput, in flight and TTFT above the server's queue, running and own
    TTFT / queue time, one shared time axis (the report's buckets)."""
    fig, axes = plt.subplots(4, 1, figsize=(9, 9), sharex=True)
    t_srv = pd.to_datetime(srv["bucket"], utc=True)
    if not ts.empty:
        tot = ts.assign(bucket=pd.to_datetime(ts["bucket"], utc=True)).groupby("bucket")
        client = tot[["output_tokens_per_s", "in_flight"]].sum(min_count=1)
        axes[0].plot(client.index, client["output_tokens_per_s"], label="output tok/s")
        axes[0].plot(client.index, client["in_flight"], label="in flight")
    for ax, cols in zip(
        axes[1:],
        (
            ("ttft_p50_ms", "ttft_p90_ms"),
            ("queue", "running"),
            ("server_ttft_ms", "server_queue_ms"),
        ),
        strict=True,
    ):
        for col in cols:
            if col in srv and srv[col].notna().any():
                ax.plot(t_srv, srv[col], label=col)
    for ax, title in zip(
        axes,
        ("client", "client TTFT (ms)", "server queue / running", "server TTFT / queue (ms)"),
        strict=True,
    ):
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
