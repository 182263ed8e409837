"""The run summary as people read it: the terminal table of levels, the saturation search's line
and the client-vs-server table. The numbers are analysis.reports.summary's; this module only
formats them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from analysis.reports.summary import LATENCIES


def search_line(summary: Mapping[str, Any]) -> str | None:
    """The saturation search's answer in one sentence (run table, report, UI); None without one."""
    sr = summary.get("search")
    if not sr:
        return None
    if sr.get("per_shard"):
        per = "; ".join(
            f"{k}: {_fmt(v.get('highest_passing'), 3)}" for k, v in sorted(sr["per_shard"].items())
        )
        return (
            "saturation search, each shard on its own samples (not pooled): highest load "
            f"meeting the SLOs {per}; all of them: {_fmt(sr.get('highest_passing'), 3)} req/s"
        )
    best, nxt = sr.get("highest_passing"), sr.get("next_failing")
    conf = sr.get("confidence")
    text = "saturation search: highest load meeting the SLOs " + (
        f"{best:g} req/s" if best is not None else "none (no tried load passed)"
    )
    if nxt is not None:
        text += f"; next tried {nxt:g} req/s: {sr.get('next_verdict')}"
    if conf is not None:
        text += f" (exact binomial, {conf:.0%} confidence)"
    if sr.get("stopped_early"):
        text += (
            f"; shard(s) {', '.join(sr['stopped_early'])} stopped before the search ended "
            "(cut short): the answer is the others' complete one"
        )
    if sr.get("pool_complete") is False:
        missing = ", ".join(sr.get("missing_shards") or []) or "?"
        text += (
            f"; judged on an incomplete pool: shard(s) {missing} did not hand in their "
            "samples of some level"
        )
    return text


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _trio(p: Mapping[str, Any]) -> str:
    return " / ".join(_fmt(p.get(k)) for k in ("p50", "p90", "p99"))


def render_summary_table(summary: Mapping[str, Any]) -> Table:
    """A rich Table: one row per level (load, counts, rates, latency p50/p90/p99 in ms)."""
    valid = summary.get("valid")
    verdict = "valid" if valid else ("INVALID" if valid is False else "validity unknown")
    title = f"run {summary.get('name') or ''} {summary.get('run_id', '')[:8]} — {verdict}"
    reasons = summary.get("invalid_reasons") or []
    caption = "latencies ms p50 / p90 / p99 (steady phase, ok requests; TTFT from send, ITL "
    caption += "per token); new conn: share of sent requests that opened a connection, its "
    caption += "set-up ms p50 / p99"
    if summary.get("resent") is not None:
        caption += f"; re-sent on a new connection: {summary['resent']} in the run"
    if reasons:
        caption = "INVALID: " + "; ".join(str(r) for r in reasons) + "\n" + caption
    n = summary.get("choices")
    if n is not None and n > 1:
        title += f" — n = {n}"
        caption += f"; n = {n} choices a request: ITL per choice, TPOT the mean over its choices"
    search = search_line(summary)
    if search:
        caption = search + "\n" + caption
    t = Table(title=title, caption=caption)
    for col in (
        "level",
        "load (configured → achieved)",
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
        "load delivered",
    ):
        t.add_column(col, justify="right" if col not in ("level", "load delivered") else "left")
    for lvl in summary.get("levels", []):
        kind = lvl.get("kind") or ""
        load = f"{kind} {_fmt(lvl.get('value'), 0)} → {_fmt(lvl.get('achieved'), 1)}"
        conn = lvl.get("connections") or {}
        t.add_row(
            str(lvl["level"]),
            load,
            str(lvl["requests_ok"]),
            str(lvl["requests_failed"]),
            _fmt(lvl.get("request_rate"), 2),
            _fmt(lvl.get("output_tokens_per_s"), 1),
            *(_trio(lvl.get(k) or {}) for k in LATENCIES),
            connection_cell(conn),
            "—" if conn.get("resent") is None else str(conn["resent"]),
            "FLAGGED: " + "; ".join(lvl["flags"]) if lvl.get("flags") else "ok",
        )
    return t


def connection_cell(conn: Mapping[str, Any]) -> str:
    """ "12.5% · 0.8 / 2.1": the new-connection share, then set-up p50 / p99 (ms)."""
    share = conn.get("new_share")
    if share is None:
        return "—"
    pct = conn.get("connect_ms") or {}
    text = f"{100 * share:.1f}%"
    if conn.get("opened"):
        text += f" · {_fmt(pct.get('p50'), 2)} / {_fmt(pct.get('p99'), 2)}"
    return text


CLIENT_VS_SERVER = (
    ("client TTFT p50", "client_ttft_p50_ms"),
    ("server prefill+queue p50", "server_prefill_p50_ms"),
    ("TTFT gap", "ttft_gap_ms"),
    ("client ITL p50", "client_itl_p50_ms"),
    ("server ITL p50", "server_itl_p50_ms"),
    ("ITL gap", "itl_gap_ms"),
)


def client_vs_server_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per level and per (level, region) that has server timings: "level", "region"
    ("all" for the level) and the `client_vs_server` numbers (ms), for the tables of the CLI,
    the report and the UI. Empty when the run has no server timings."""
    rows: list[dict[str, Any]] = []
    for lvl in summary.get("levels", []):
        blocks = [("all", lvl), *sorted((lvl.get("regions") or {}).items())]
        if len(blocks) == 2:  # one region: the same numbers as the level's
            blocks = blocks[:1]
        for region, block in blocks:
            cvs = block.get("client_vs_server")
            if cvs:
                rows.append({"level": lvl["level"], "region": region, **cvs})
    return rows


def render_client_vs_server_table(summary: Mapping[str, Any]) -> Table | None:
    """Client vs server per level (and region), or None when the server reported no timings."""
    rows = client_vs_server_rows(summary)
    if not rows:
        return None
    t = Table(
        title="client vs server (the server's own timings)",
        caption="ms; p50 over ok steady requests the server timed; server ITL = decode ms / "
        "(tokens - 1); gap = client - server (network, client, unreported queue)",
    )
    t.add_column("level", justify="left")
    t.add_column("region", justify="left")
    for head, _ in CLIENT_VS_SERVER:
        t.add_column(head, justify="right")
    t.add_column("requests", justify="right")
    for r in rows:
        t.add_row(
            str(r["level"]),
            str(r["region"]),
            *(_fmt(r.get(k), 2) for _, k in CLIENT_VS_SERVER),
            str(max(r.get("ttft_n") or 0, r.get("itl_n") or 0)),
        )
    return t
