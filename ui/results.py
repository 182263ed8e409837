"""Glue between a stored run and what the CLI prints: the summary is always read back from the
store and computed by `analysis`, so the numbers printed are the numbers kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from analysis.reports.cost import run_cost
from analysis.reports.report import keep_default_results
from analysis.reports.summary import level_summary
from analysis.reports.summary_audio import render_audio_table
from analysis.reports.summary_table import render_client_vs_server_table, render_summary_table
from analysis.reports.workload_table import render_adapter_table, render_prefix_table
from analysis.stats.server_metrics import server_section
from analysis.store.fastload import load_requests_fast
from analysis.store.load import load_levels, load_run
from analysis.store.summaries import store_summary
from analysis.verdicts import sla
from analysis.verdicts.exitcodes import Exit
from analysis.verdicts.verdict import judge_run
from ui.verdict_table import verdict_table
from workers.store.connect import connect_store


def summarize_run(run_id: str, database_url: str | None = None) -> dict[str, Any]:
    """The `peakload run --json` summary of a stored run, with `verdict`: the run judged against
    its spec's criteria (analysis.verdicts.verdict), whose `exit_code` `run` and `submit` exit
    with."""
    with connect_store(database_url, autocommit=True) as conn:
        run = load_run(conn, run_id)
        # one binary COPY (analysis.store.fastload): a few bytes per chunk, not a Python object
        # per row, so the summary of a long run costs little memory
        requests, chunks = load_requests_fast(conn, run_id)
        levels = load_levels(conn, run_id)
        summary = level_summary(requests, levels, run, chunks=chunks)
        verdict = judge_run(run, requests, levels, chunks=chunks).to_json()
        # kept, with the verdict, for the pages and reports that read them later
        # (analysis.store.summaries): a finished run's are then one row, not a pass over every
        # request
        store_summary(conn, run, summary, verdict)
        # and the curves and frontier a report shows by default (analysis.store.derived): the
        # run's first report or page on any machine reads them instead of every chunk
        keep_default_results(conn, run_id, requests, levels, chunks)
        # where the time went (the server's own metrics, when scraped) and what it cost
        server = server_section(conn, run, requests, summary["levels"], 1.0)
    summary["diagnosis"] = server["diagnosis"]
    summary["server_levels"] = {str(k): v for k, v in server["levels"].items()}
    summary["cost"] = run_cost(run, requests, summary["levels"])
    summary["verdict"] = verdict
    return summary


def summary_exit_code(summary: dict[str, Any]) -> Exit:
    return Exit(int(summary["verdict"]["exit_code"]))


def print_verdict(summary: dict[str, Any], console: Console, title: str = "criteria") -> None:
    """The criteria table and the one-line verdict under the summary."""
    v = summary["verdict"]
    verdicts = [sla.ClaimVerdict(**c) for c in v["criteria"]]
    if verdicts:
        levels = len(summary.get("levels") or [])
        loads = int(v.get("loads") or 1)
        where = (
            f" at level {v['level']}"
            if v["level"] is not None
            else f", each claim at each of the run's {loads} loads, the error budget over all"
            if loads > 1
            else f", every steady request of the run's {levels} levels pooled"
            if levels > 1
            else ""
        )
        console.print(verdict_table(verdicts, title=title + where))
    style = "green" if v["exit_code"] == 0 else "bold red"
    name = v["verdict"].replace("_", " ").upper()
    console.print(f"[{style}]{name}[/] (exit {v['exit_code']}): {v['reason']}")


def print_summary(summary: dict[str, Any], console: Console) -> None:
    console.print(render_summary_table(summary))
    audio = render_audio_table(summary)
    if audio is not None:
        console.print(audio)
    server = render_client_vs_server_table(summary)
    if server is not None:
        console.print(server)
    for table in (render_adapter_table(summary), render_prefix_table(summary)):
        if table is not None:
            console.print(table)
    if summary.get("valid") is False:
        console.print(
            "[bold red]INVALID MEASUREMENT[/]: the generator, not the server, may have "
            "shaped these numbers:"
        )
        for why in summary.get("invalid_reasons") or []:
            console.print(f"  - {why}")
    diag = summary.get("diagnosis")
    if diag and diag.get("verdict") != "unknown":
        console.print(f"[bold]where the time went[/]: {diag['sentence']}")
    cost = summary.get("cost")
    if cost and cost.get("basis"):
        console.print(f"[bold]cost[/]: {cost_line(cost)}")
    if "verdict" in summary:
        print_verdict(summary, console)


def cost_line(cost: dict[str, Any]) -> str:
    """One line: the run's cost, per million output tokens at the best level, break-even."""
    p = cost["prices"]
    per_token = (
        f"${p['input_per_mtok']:g} / ${p['output_per_mtok']:g} per million input / output tokens"
        + (f" (as of {p['as_of']})" if p.get("as_of") else "")
        if p.get("output_per_mtok") is not None
        else ""
    )
    if cost["basis"] == "self-hosted":
        price = f"${p['gpu_hourly_usd']:g}/GPU-hour x {p['gpus']}"
        if per_token:
            price += f", against per-token {per_token}"
    elif cost["basis"] == "per-audio-hour":
        price = f"${p['audio_per_hour']:g} per audio hour" + (
            f" (as of {p['as_of']}, {p['source']})" if p.get("as_of") else ""
        )
    else:
        price = per_token
    rated = [lv for lv in cost["levels"] if lv.get("usd_per_mtok_output") is not None]
    best = max(rated, key=lambda lv: lv["output_tokens_per_s"] or 0.0, default=None)
    parts = [f"{cost['basis']} ({price}): this run cost ${cost['total_usd'] or 0:,.4f}"]
    if best is not None:
        parts.append(
            f"${best['usd_per_mtok_output']:,.3f} per million output tokens at level "
            f"{best['level']} ({best['output_tokens_per_s']:,.0f} tokens/s)"
        )
    if cost.get("break_even"):
        parts.append(f"break-even: {cost['break_even']['sentence']}")
    audio = cost.get("audio")
    if audio:
        priced = [lv for lv in audio["levels"] if lv.get("usd_per_audio_hour") is not None]
        rates = ", ".join(f"level {lv['level']} ${lv['usd_per_audio_hour']:,.4f}" for lv in priced)
        parts.append(
            f"{audio['audio_hours'] * 3600:,.1f} s of audio"
            + (f"; per audio hour: {rates}" if rates else "")
        )
    return "; ".join(parts)


def write_json(summary: dict[str, Any], path: str) -> None:
    """Write the summary atomically (a reader never sees half a file)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(p)
