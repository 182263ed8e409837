"""Cached data access for the Streamlit pages: one shared store connection (`st.cache_resource`,
opened on first use, never at import), raw request frames cached as resources (no copy per
rerun), and every derived result cached with a TTL. Numbers come from analysis/ (and the
adapters in ui/derive.py); pages get display-ready frames and dicts.

Times shown are UTC; latencies ms; rates per second over the steady window.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import psycopg
import streamlit as st

from analysis import cache as acache
from analysis import cost as acost
from analysis import load as al
from analysis import metrics as m
from analysis import regions as aregions
from analysis import render as arender
from analysis import report as areport
from analysis import server_metrics as asrv
from analysis.export import write_requests
from analysis.probe import load_probe, probe_rows
from analysis.summary import CLIENT_VS_SERVER, client_vs_server_rows, level_summary
from analysis.summary import search_line as search_line
from ui import derive

RUNS_TTL_S = 5
RESULT_TTL_S = 600
TIMELINE_SAMPLE = 40
LOAD_CONNECTIONS = 2  # connections reading one run at once (analysis.fastload)


class Store:
    """One connection shared by the app's sessions, used under a lock and reopened if lost."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    @contextmanager
    def conn(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = al.open_store(self.url)
            try:
                yield self._conn
            except psycopg.OperationalError:
                self._conn.close()
                self._conn = None
                raise


def store_url() -> str:
    """The store the app reads: `PEAKLOAD_DATABASE_URL`, else the embedded default."""
    url = os.environ.get(al.DATABASE_URL_ENV, "").strip()
    return url or _embedded_url()


@st.cache_resource(show_spinner="Starting the embedded store…")
def _embedded_url() -> str:
    from workers.store.connect import database_url

    return database_url()


def store() -> Store:
    """The shared store for the configured URL (read on each call, so a changed environment
    gets its own connection)."""
    return _store(store_url())


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    from workers.store.connect import ensure_schema

    ensure_schema(url)
    return Store(url)


# ---------------------------------------------------------------- runs


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def runs(
    name: str | None = None,
    target: str | None = None,
    model: str | None = None,
    label: str | None = None,
    status: str | None = None,
    schedule: str | None = None,
    limit: int = 500,
) -> pd.DataFrame:
    """Stored runs, newest first (analysis.load.load_runs); `label` is "key=value"."""
    labels = None
    if label and "=" in label:
        k, v = label.split("=", 1)
        labels = {k.strip(): v.strip()}
    from workers.local_lease import reap_dead_local_runs

    with store().conn() as c:
        reap_dead_local_runs(c)  # a local run whose process died is listed failed, with why
        return al.load_runs(
            c,
            name_like=name or None,
            target_like=target or None,
            model=model or None,
            labels=labels,
            status=status or None,
            schedule_name=schedule or None,
            limit=limit,
        )


def runs_table(df: pd.DataFrame, since: Any = None, until: Any = None) -> pd.DataFrame:
    """The Runs page's table: one row per run, labels as `k=v` text, validity as a word."""
    out = pd.DataFrame(
        {
            "run_id": df["run_id"],
            "name": df["name"],
            "target": df["target_url"],
            "model": df["model"],
            "labels": [_labels_text(x) for x in df["labels"]],
            "start": df["started_at"],
            "duration_s": df["duration_s"],
            "status": df["status"],
            "validity": [validity_word(v) for v in df["valid"]],
            "requests": df["requests"],
            "errors": df["errors"],
        }
    )
    if since is not None:
        out = out[out["start"].isna() | (out["start"].dt.date >= since)]
    if until is not None:
        out = out[out["start"].isna() | (out["start"].dt.date <= until)]
    return out.reset_index(drop=True)


def _labels_text(labels: Any) -> str:
    if not isinstance(labels, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if v not in (None, {}, ""))


def validity_word(v: Any) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "unknown"
    return "valid" if bool(v) else "INVALID"


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def run(run_id: str) -> dict[str, Any]:
    """One run's row (analysis.load.load_run); LookupError if absent."""
    with store().conn() as c:
        return al.load_run(c, run_id)


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def probe(run_id: str) -> pd.DataFrame:
    """The parameter probe stored with the run (analysis.probe): one row per parameter."""
    with store().conn() as c:
        result = load_probe(c, run_id)
    cols = ["parameter", "verdict", "detail"]
    return pd.DataFrame(probe_rows(result) if result else [], columns=cols)


def choices(df: pd.DataFrame) -> dict[str, str]:
    """run_id -> a readable label for pickers (name, short id, start)."""
    out: dict[str, str] = {}
    for rid, name, start in zip(df["run_id"], df["name"], df["started_at"], strict=True):
        when = "" if pd.isna(start) else f" · {start:%Y-%m-%d %H:%M}"
        out[str(rid)] = f"{name} · {str(rid)[:8]}{when}"
    return out


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def runs_for(run_ids: Sequence[str]) -> pd.DataFrame:
    with store().conn() as c:
        return al.load_runs(c, run_ids=list(run_ids), limit=None)


# ---------------------------------------------------------------- one run's results


def version(run_id: str) -> str:
    """What identifies a run's current content: status, end and row count (a running run's
    results are recomputed as it grows; a finished run's never change)."""
    r = run(run_id)
    return f"{r['status']}|{r['ended_at']}|{r['requests']}"


@st.cache_resource(ttl=RESULT_TTL_S, max_entries=12, show_spinner=False)
def _loaded(run_id: str, version: str) -> tuple[pd.DataFrame, m.ChunkArrays]:
    """The run's requests and chunk arrays (analysis.cache.load_run_cached: fast binary load,
    kept on disk once the run has ended), shared read-only; no content columns."""
    df, ch, _hit = acache.load_run_cached(store().url, run_id, parallel=LOAD_CONNECTIONS)
    return df, ch


def requests(run_id: str) -> pd.DataFrame:
    """All of a run's requests (the frame of analysis.fastload, in store order)."""
    return _loaded(run_id, version(run_id))[0]


def chunks(run_id: str) -> m.ChunkArrays:
    """Every request's chunk offsets (µs from send) and tokens, aligned with `requests`."""
    return _loaded(run_id, version(run_id))[1]


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def levels(run_id: str) -> pd.DataFrame:
    with store().conn() as c:
        return al.load_levels(c, run_id)


def summary(run_id: str) -> dict[str, Any]:
    """analysis.summary.level_summary of the run."""
    return _summary(run_id, version(run_id))


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _summary(run_id: str, version: str) -> dict[str, Any]:
    return level_summary(requests(run_id), levels(run_id), run(run_id), chunks=chunks(run_id))


def headline(s: dict[str, Any]) -> dict[str, Any]:
    """The summary cards: totals over levels, best throughput, p99 TTFT at the busiest level."""
    lv = s.get("levels") or []
    ok = sum(int(x.get("requests_ok") or 0) for x in lv)
    failed = sum(int(x.get("requests_failed") or 0) for x in lv)
    busiest: dict[str, Any] = max(lv, key=lambda x: x.get("request_rate") or 0.0, default={})
    return {
        "requests": ok + failed,
        "failed": failed,
        "error_rate": failed / (ok + failed) if ok + failed else None,
        "best_request_rate": busiest.get("request_rate"),
        "best_tokens_per_s": max((x.get("output_tokens_per_s") or 0.0 for x in lv), default=None),
        "p99_ttft_ms": (busiest.get("ttft_ms") or {}).get("p99"),
        "busiest_level": busiest.get("level"),
    }


def level_table(s: dict[str, Any]) -> pd.DataFrame:
    """Per level: load, counts, rates, latency p50/p90/p99 (ms), goodput where SLOs exist."""
    rows = []
    for x in s.get("levels") or []:
        row: dict[str, Any] = {
            "level": x["level"],
            "load": f"{x.get('kind') or ''} {x.get('value') if x.get('value') is not None else ''}",
            "achieved": x.get("achieved"),
            "ok": x.get("requests_ok"),
            "failed": x.get("requests_failed"),
            "req/s": x.get("request_rate"),
            "out tok/s": x.get("output_tokens_per_s"),
        }
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for q in ("p50", "p90", "p99"):
                row[f"{metric[:-3].upper()} {q}"] = (x.get(metric) or {}).get(q)
        if "goodput" in x:
            row["goodput req/s"] = x.get("goodput")
        conn = x.get("connections") or {}
        share = conn.get("new_share")
        row["new conn %"] = None if share is None else 100 * share
        row["connect p50 ms"] = (conn.get("connect_ms") or {}).get("p50")
        row["connect p99 ms"] = (conn.get("connect_ms") or {}).get("p99")
        row["re-sent"] = conn.get("resent")
        row["between levels"] = x.get("between_levels")
        row["other levels in flight (max)"] = x.get("other_levels_in_flight_max")
        row["load delivered"] = "FLAGGED: " + "; ".join(x["flags"]) if x.get("flags") else "ok"
        rows.append(row)
    return pd.DataFrame(rows)


def client_vs_server_table(s: dict[str, Any]) -> pd.DataFrame:
    """Per level (and region, where the run has several): the client's TTFT and ITL p50 against
    the server's own prefill(+queue) and time between tokens, and the gaps (ms); empty when the
    server reported no timings (analysis.summary.client_vs_server_rows)."""
    cols = ["level", "region", *(head for head, _ in CLIENT_VS_SERVER), "requests"]
    rows = [
        [
            r["level"],
            r["region"],
            *(r.get(k) for _, k in CLIENT_VS_SERVER),
            max(r.get("ttft_n") or 0, r.get("itl_n") or 0),
        ]
        for r in client_vs_server_rows(s)
    ]
    return pd.DataFrame(rows, columns=cols)


def spectra(run_id: str, metric: str, by: str) -> pd.DataFrame:
    """Percentile curves of one run's `metric` per level or per region (ui.derive)."""
    return _spectra(run_id, version(run_id), metric, by)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _spectra(run_id: str, version: str, metric: str, by: str) -> pd.DataFrame:
    return derive.spectra_by(requests(run_id), metric, by, chunks(run_id))


def series(run_id: str, bucket_s: float = 1.0) -> pd.DataFrame:
    """Throughput, in-flight and errors per time bucket and region (analysis.load.timeseries)."""
    return _series(run_id, version(run_id), bucket_s)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _series(run_id: str, version: str, bucket_s: float) -> pd.DataFrame:
    with store().conn() as c:
        return al.timeseries(c, run_id, bucket_s)


def server_view(run_id: str, bucket_s: float = 1.0) -> dict[str, Any]:
    """The server's own series beside the client's (analysis.server_metrics.server_section):
    `rows` per bucket (queue, running, KV use, server TTFT/queue ms, client TTFT p50/p90),
    `levels` per-level means, `diagnosis` and the `metrics` names that matched."""
    return _server_view(run_id, version(run_id), bucket_s)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _server_view(run_id: str, version: str, bucket_s: float) -> dict[str, Any]:
    with store().conn() as c:
        return asrv.server_section(
            c, run(run_id), requests(run_id), summary(run_id)["levels"], bucket_s
        )


def region_network(run_id: str) -> pd.DataFrame:
    """Per region (analysis.regions): TTFT, network round trip, server time, connection
    set-up and clock offset / uncertainty, one row each, display names as columns (ms)."""
    return _region_network(run_id, version(run_id))


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _region_network(run_id: str, version: str) -> pd.DataFrame:
    with store().conn() as c:
        rows = aregions.region_breakdown(requests(run_id), aregions.shard_probes(c, run_id))
    out = []
    for r in rows:
        out.append(
            {
                "region": r["region"],
                "ok": r["requests_ok"],
                **{f"TTFT {k}": v for k, v in r["ttft_ms"].items()},
                "network RTT": r["network_rtt_ms"],
                **{f"server {k}": v for k, v in r["server_time_ms"].items()},
                "server time from": r.get("server_time_source"),
                "server-reported queue p50": (r.get("server_queue_ms") or {}).get("p50"),
                "server-reported prefill p50": (r.get("server_prefill_ms") or {}).get("p50"),
                "conn set-up (probe)": r["connection_setup_ms"],
                "clock ± ms": r["clock_uncertainty_ms"],
                "clock uncertain": ", ".join(r["clock_suspect_shards"]),
            }
        )
    return pd.DataFrame(out)


def cost_overview(run_ids: Sequence[str]) -> pd.DataFrame:
    """One row per run (analysis.cost.run_cost): price basis, what it cost, USD per million
    output tokens at its best level's throughput, and the break-even when both prices exist."""
    rows = []
    for rid in run_ids:
        c = acost.run_cost(run(rid), requests(rid), summary(rid)["levels"])
        rated = [lv for lv in c["levels"] if lv.get("usd_per_mtok_output") is not None]
        best = max(rated, key=lambda lv: lv["output_tokens_per_s"] or 0.0, default=None)
        be = c["break_even"]
        rows.append(
            {
                "run": rid,
                "basis": c["basis"] or "no price",
                "cost USD": c["total_usd"],
                "best out tok/s": best["output_tokens_per_s"] if best else None,
                "USD per M output": best["usd_per_mtok_output"] if best else None,
                "break-even out tok/s": be["output_tokens_per_s"] if be else None,
                "prices as of": c["prices"]["as_of"],
            }
        )
    return pd.DataFrame(rows)


def server_level_table(view: dict[str, Any]) -> pd.DataFrame:
    """One row per level of `server_view`'s per-level means, display names as columns."""
    names = {
        "queue_mean": "queue mean",
        "queue_max": "queue max",
        "running_mean": "running mean",
        "kv_cache_mean": "KV use mean",
        "server_ttft_ms": "server TTFT ms",
        "server_queue_ms": "server queue ms",
        "server_prefill_ms": "server prefill + first step ms",
    }
    rows = [
        {
            "level": lv,
            **{label: stats.get(k) for k, label in names.items()},
            "split from": asrv.split_sources(stats),
        }
        for lv, stats in sorted(view["levels"].items())
    ]
    return pd.DataFrame(rows, columns=["level", *names.values(), "split from"])


def token_timeline(run_id: str, n: int = TIMELINE_SAMPLE) -> pd.DataFrame:
    """Up to `n` requests sampled evenly over the run (by scheduled time), one row per chunk:
    the request's scheduled→end span (s from the run's first schedule) and each chunk's
    arrival (s, on the same axis: send + offset)."""
    return _token_timeline(run_id, version(run_id), n)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _token_timeline(run_id: str, version: str, n: int) -> pd.DataFrame:
    df, ch = requests(run_id), chunks(run_id)
    cols = ["request", "outcome", "start_s", "end_s", "chunk_s", "tokens"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    sched = df["scheduled_at"].astype("int64").to_numpy()
    order = np.argsort(sched, kind="stable")
    pick = order[np.unique(np.linspace(0, len(df) - 1, min(n, len(df))).round().astype(int))]
    t0 = int(sched[order[0]])
    rows = []
    for i in pick:
        r = df.iloc[i]
        start = (int(sched[i]) - t0) / 1e9
        sent = start + (0.0 if pd.isna(r["sent_ns"]) else r["sent_ns"] / 1e9)
        end = start + (np.nan if pd.isna(r["end_ns"]) else r["end_ns"] / 1e9)
        label = f"#{int(r['idx'])} {r['region']} L{int(r['level'])}"
        base = {"request": label, "outcome": r["outcome"], "start_s": start, "end_s": end}
        lo, hi = int(ch.ptr[i]), int(ch.ptr[i + 1])
        if lo == hi:
            rows.append({**base, "chunk_s": np.nan, "tokens": 0})
        for o, k in zip(ch.offsets_us[lo:hi], ch.tokens[lo:hi], strict=True):
            rows.append({**base, "chunk_s": sent + float(o) / 1e6, "tokens": int(k)})
    return pd.DataFrame(rows, columns=cols)


def failures(run_id: str) -> pd.DataFrame:
    """Failures by kind (analysis.metrics.error_rates): kind, count, rate of all requests."""
    return _failures(run_id, version(run_id))


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _failures(run_id: str, version: str) -> pd.DataFrame:
    rates = m.error_rates(requests(run_id))
    return pd.DataFrame(
        [{"kind": k, "count": v["count"], "rate": v["rate"]} for k, v in rates.items()],
        columns=["kind", "count", "rate"],
    )


def labels_table(r: dict[str, Any]) -> pd.DataFrame:
    """The test-matrix labels as (label, value) rows."""
    labels = r.get("labels") or {}
    return pd.DataFrame(
        [
            {"label": k, "value": json.dumps(v) if isinstance(v, dict) else str(v)}
            for k, v in sorted(labels.items())
            if v not in (None, "", {})
        ],
        columns=["label", "value"],
    )


# ---------------------------------------------------------------- exports


def export_bytes(run_id: str, fmt: str) -> bytes:
    """The run's requests as CSV or Parquet (analysis.export), content columns excluded."""
    with store().conn() as c:
        df = al.load_requests(c, run_id)  # every column, arrays included (not the fast frame)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"requests.{fmt}"
        write_requests(df, p, fmt)  # type: ignore[arg-type]
        return p.read_bytes()


def report_html(run_id: str) -> bytes:
    """The run's self-contained HTML report (analysis.report.build_report, analysis.render)."""
    with store().conn() as c:
        report = areport.build_report(c, run_id)
    return arender.render_html(report).encode("utf-8")


def csv_bytes(df: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    return buf.getvalue().encode("utf-8")
