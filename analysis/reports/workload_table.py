"""The run summary's per-adapter and prefix-cache blocks (analysis.stats.workload_split) as rows
and tables: one row per (level, adapter) with its latency, throughput and switch cost, and one
per (level, arm) with TTFT with vs without the shared prefix beside the server's cache hits.
The same rows feed the terminal (rich), the HTML report and the UI's Run page."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from rich.table import Table


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _trio(p: Mapping[str, Any] | None) -> str:
    return " / ".join(_fmt((p or {}).get(k)) for k in ("p50", "p90", "p99"))


def adapter_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (level, adapter): counts, rates, p50/p90/p99 of TTFT, TPOT and E2E (ms),
    TTFT p50 after a switch and steady, the switch cost (ms). Empty without adapters."""
    rows: list[dict[str, Any]] = []
    for lvl in summary.get("levels", []):
        for name, b in sorted((lvl.get("adapters") or {}).items()):
            sw = b.get("switch") or {}
            rows.append({
                "level": lvl["level"],
                "adapter": name,
                "ok": b.get("requests_ok"),
                "failed": b.get("requests_failed"),
                "req_s": b.get("request_rate"),
                "tok_s": b.get("output_tokens_per_s"),
                **{f"{k}_{q}": (b.get(k) or {}).get(q) for k in ("ttft_ms", "tpot_ms", "e2e_ms")
                   for q in ("p50", "p90", "p99")},
                "switches": sw.get("switches"),
                "ttft_after_switch_p50": (sw.get("ttft_after_switch_ms") or {}).get("p50"),
                "n_after_switch": sw.get("n_after_switch"),
                "ttft_steady_p50": (sw.get("ttft_steady_ms") or {}).get("p50"),
                "n_steady": sw.get("n_steady"),
                "switch_cost_ms": sw.get("switch_cost_ms"),
            })  # fmt: skip
    return rows


def prefix_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (level, arm: with / without the shared prefix, or all): requests, TTFT
    p50/p90/p99 (ms), planned shared tokens, the server's cached tokens p50 and hit share, and
    the level's TTFT ratio with / without. Empty when no level has a prefix_cache block."""
    rows: list[dict[str, Any]] = []
    for lvl in summary.get("levels", []):
        pc = lvl.get("prefix_cache") or {}
        for arm in ("with", "without", "all"):
            b = pc.get(arm)
            if not b:
                continue
            rows.append({
                "level": lvl["level"],
                "arm": arm,
                "requests": b.get("requests"),
                **{f"ttft_{q}": (b.get("ttft_ms") or {}).get(q) for q in ("p50", "p90", "p99")},
                "shared_prefix_tokens": b.get("shared_prefix_tokens"),
                "cache_reported": b.get("cache_reported"),
                "cached_tokens_p50": (b.get("cached_tokens") or {}).get("p50"),
                "hit_share": b.get("hit_share"),
                "ttft_ratio": pc.get("ttft_ratio"),
            })  # fmt: skip
    return rows


def render_adapter_table(summary: Mapping[str, Any]) -> Table | None:
    """Per adapter per level, or None when the run names no adapters."""
    rows = adapter_rows(summary)
    if not rows:
        return None
    t = Table(
        title="per adapter ([[workload.adapters]])",
        caption="ms p50 / p90 / p99 over ok steady requests of the adapter; req/s and tok/s in "
        "the level's steady window; switch cost = TTFT p50 after a switch - TTFT p50 of steady "
        "requests of the same adapter (n after switch / steady)",
    )
    for head in ("level", "adapter"):
        t.add_column(head, justify="left")
    for head in ("ok", "failed", "req/s", "out tok/s", "TTFT", "TPOT", "E2E", "switches"):
        t.add_column(head, justify="right")
    t.add_column("TTFT after switch / steady", justify="right")
    t.add_column("switch cost", justify="right")
    for r in rows:
        t.add_row(
            str(r["level"]),
            str(r["adapter"]),
            str(r["ok"]),
            str(r["failed"]),
            _fmt(r["req_s"], 2),
            _fmt(r["tok_s"]),
            *(" / ".join(_fmt(r[f"{k}_{q}"]) for q in ("p50", "p90", "p99"))
              for k in ("ttft_ms", "tpot_ms", "e2e_ms")),
            str(r["switches"]),
            f"{_fmt(r['ttft_after_switch_p50'])} / {_fmt(r['ttft_steady_p50'])} "
            f"(n {r['n_after_switch']} / {r['n_steady']})",
            _fmt(r["switch_cost_ms"]),
        )  # fmt: skip
    return t


def render_prefix_table(summary: Mapping[str, Any]) -> Table | None:
    """TTFT with vs without the shared prefix per level, with the server's cache hits."""
    rows = prefix_rows(summary)
    if not rows:
        return None
    t = Table(
        title="prefix cache (with vs without the shared prefix)",
        caption="TTFT ms p50 / p90 / p99 over ok steady requests; cached = the server's own "
        "count of prompt tokens from its cache (llama.cpp cache_n, usage cached_tokens), p50; "
        "hits = share of requests it reported > 0 for; ratio = TTFT p50 with / without",
    )
    for head in ("level", "arm"):
        t.add_column(head, justify="left")
    for head in ("requests", "TTFT", "shared tokens", "cached p50", "hits", "ratio"):
        t.add_column(head, justify="right")
    for r in rows:
        hits = r["hit_share"]
        t.add_row(
            str(r["level"]),
            str(r["arm"]),
            str(r["requests"]),
            " / ".join(_fmt(r[f"ttft_{q}"]) for q in ("p50", "p90", "p99")),
            _fmt(r["shared_prefix_tokens"], 0),
            _fmt(r["cached_tokens_p50"], 0),
            "—" if hits is None else f"{hits:.0%}",
            _fmt(r["ttft_ratio"], 2),
        )
    return t


def _html_table(rows: list[list[Any]], head: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><tr>{cells}</tr>{body}</table>"


def workload_html(summary: Mapping[str, Any]) -> str:
    """The HTML report's "Per adapter" and "Prefix cache" sections ("" for a run without)."""
    parts = []
    if rows := adapter_rows(summary):
        parts.append(
            "<h2>Per adapter</h2><p>Each LoRA adapter's own requests: ms p50 / p90 / p99 over "
            "its ok steady requests; switch cost = TTFT p50 right after a switch - TTFT p50 of "
            "its steady requests</p>"
        )
        parts.append(
            _html_table(
                [
                    [
                        r["level"], r["adapter"], r["ok"], r["failed"], _fmt(r["req_s"], 2),
                        _fmt(r["tok_s"]),
                        *(" / ".join(_fmt(r[f"{k}_{q}"]) for q in ("p50", "p90", "p99"))
                          for k in ("ttft_ms", "tpot_ms", "e2e_ms")),
                        r["switches"],
                        f"{_fmt(r['ttft_after_switch_p50'])} (n {r['n_after_switch']})",
                        f"{_fmt(r['ttft_steady_p50'])} (n {r['n_steady']})",
                        _fmt(r["switch_cost_ms"]),
                    ]
                    for r in rows
                ],
                ["level", "adapter", "ok", "failed", "req/s", "out tok/s", "TTFT", "TPOT",
                 "E2E", "switches", "TTFT after switch", "TTFT steady", "switch cost"],
            )
        )  # fmt: skip
    if rows := prefix_rows(summary):
        parts.append(
            "<h2>Prefix cache</h2><p>TTFT (ms p50 / p90 / p99) with vs without the run's "
            "shared prefix, beside the server's own count of cached prompt tokens</p>"
        )
        parts.append(
            _html_table(
                [
                    [
                        r["level"], r["arm"], r["requests"],
                        " / ".join(_fmt(r[f"ttft_{q}"]) for q in ("p50", "p90", "p99")),
                        _fmt(r["shared_prefix_tokens"], 0), _fmt(r["cached_tokens_p50"], 0),
                        "—" if r["hit_share"] is None else f"{r['hit_share']:.0%}",
                        _fmt(r["ttft_ratio"], 2),
                    ]
                    for r in rows
                ],
                ["level", "arm", "requests", "TTFT", "shared tokens", "cached p50", "hits",
                 "ratio with / without"],
            )
        )  # fmt: skip
    return "".join(parts)


def server_counter_lines(counters: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The server's own prefix-cache counters per level (analysis.stats.prefix_counters) as
    sentences; [] when the run scraped none."""
    out = []
    for lv, c in sorted(counters.items(), key=lambda kv: int(kv[0])):
        rate = c.get("hit_rate")
        out.append(
            f"level {lv}: the server's prefix cache ({c['metric']}) served "
            f"{_fmt(c.get('hits'), 0)} of {_fmt(c.get('queries'), 0)} prompt tokens"
            + ("" if rate is None else f" ({rate:.0%})")
        )
    return out
