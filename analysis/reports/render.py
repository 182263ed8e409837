"""Rendering a report (analysis/reports/report.py) as one self-contained HTML file: plotly with its
JavaScript inlined (no CDN, no network): its tables and sections here, its figures in
analysis/reports/plots.py. PNG figures for CI artifacts: analysis/reports/figures.py.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from plotly.offline import get_plotlyjs

from analysis.reports.plots import _curve_figs, _frontier_fig, _timeline_fig, _timeseries_fig
from analysis.reports.render_server import cost_html, regions_html, server_fig, server_html
from analysis.reports.summary_table import (
    CLIENT_VS_SERVER,
    client_vs_server_rows,
    connection_cell,
    search_line,
)
from analysis.reports.workload_table import server_counter_lines, workload_html
from analysis.store.imports import import_lines
from analysis.store.probe import probe_rows


def _table(rows: list[list[Any]], head: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _criteria(criteria: list[Mapping[str, Any]]) -> str:
    """A verdict's criteria (analysis.verdicts.sla.ClaimVerdict JSON), one row each."""
    return _table(
        [
            [
                c["claim"],
                c["n"],
                c.get("tokens") if c.get("tokens") is not None else "",
                c["exceedances"],
                c["observed"],
                c["exceed_upper"],
                c["verdict"],
            ]
            for c in criteria
        ],
        [
            "claim",
            "n (requests)",
            "tokens",
            "exceedances",
            "observed",
            "exceedance upper bound",
            "verdict",
        ],
    )


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
    parts.append(workload_html(report["summary"]))
    if lines := server_counter_lines(report.get("prefix_cache_server") or {}):
        parts.append("<p>" + "<br>".join(html.escape(x) for x in lines) + "</p>")
    search = search_line(report["summary"])
    if search:
        parts.append(f"<p><b>{html.escape(search)}</b></p>")
    if judged := report.get("verdict"):
        parts.append(
            "<h2>Verdict against the run's spec</h2>"
            f"<p><b>{html.escape(judged['verdict'].replace('_', ' ').upper())}</b> "
            f"(exit {int(judged['exit_code'])}, as <code>peakload run</code> exits): "
            f"{html.escape(str(judged['reason']))}</p>" + _criteria(judged["criteria"])
        )
    if report["sla"]:
        parts.append("<h2>SLA verdicts</h2>" + _criteria(report["sla"]))
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
    if imported := report.get("imported"):
        items = "".join(f"<li>{html.escape(line)}</li>" for line in import_lines(imported))
        parts.append(f"<h2>Imported results</h2><ul>{items}</ul>")
    parts.append("</body></html>")
    return "".join(parts)
