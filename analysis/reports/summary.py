"""The per-level run summary (`peakload run --json`, `peakload report`); its terminal tables are
analysis.reports.summary_table. Numbers come from analysis.metrics; this module only selects rows
and shapes the result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.reports import summary_audio
from analysis.stats import itl_spectra
from analysis.stats import workload_split as ws
from analysis.verdicts.delivered import level_delivered
from loadgen.results import formulas
from loadgen.results.reasons import STOPPED_BY_PEAKLOAD

SUMMARY_PERCENTILES = (50.0, 90.0, 99.0)
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
EXTRA_LATENCIES = ("ttft_sched_ms", "ttfat_ms", "e2e_sched_ms")

_REQ = formulas.REQUEST_METRICS
DEFINITIONS = {
    **{k: _REQ[k].definition for k in ("ttft_ms", "ttft_sched_ms", "ttfat_ms", "tpot_ms")},
    "itl_ms": formulas.ITL_DEFINITION,
    **{k: _REQ[k].definition for k in ("e2e_ms", "e2e_sched_ms")},
    "request_rate": "ok requests that completed inside the steady window / window, req/s",
    "output_tokens_per_s": "output tokens that arrived inside the steady window (a chunk of k "
    "tokens counts k at its arrival) / window, tokens/s, every level's requests pooled",
    "goodput": "requests completed inside the steady window meeting every SLO / window, req/s",
    "achieved": "concurrency: time-weighted mean of the level's own requests in flight over "
    "its steady window; rate: the level's requests sent inside it / window, req/s",
    "latency_scope": "ok requests in the steady phase; percentiles exact, numpy linear",
    **summary_audio.DEFINITIONS,
    "connections": "sent requests with their connection on record, any phase and outcome: "
    "new_share = opened a new connection / on record; connect_ms = connect_ns of those that "
    "did (TCP and TLS set-up), ms; resent = sum of re-sends on a new connection after a "
    "reused one died before any response byte (None: not recorded, stored before 0120)",
    "client_vs_server": "latency-scope requests the server reported timings for: client TTFT "
    "p50 vs server prefill + queue p50; client per-token ITL p50 (requests with a server ITL) "
    "vs server ITL p50 = decode_ms / (decode_tokens - 1), its first to last token over the "
    "gaps between them; gap = client p50 - server p50 (network, client, unreported queue); "
    "None when the server reported no timings",
    **ws.DEFINITIONS,
}


def _num(x: Any) -> float | None:
    """A JSON-safe float: None for NaN/inf/missing."""
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _pcts(values: np.ndarray) -> dict[str, float | None]:
    p = m.percentile(values, list(SUMMARY_PERCENTILES))
    return {f"p{q:g}": _num(v) for q, v in zip(SUMMARY_PERCENTILES, np.atleast_1d(p), strict=True)}


def _pct_dict(values: np.ndarray) -> dict[str, float | None]:
    return {f"p{q:g}": _num(x) for q, x in zip(SUMMARY_PERCENTILES, values, strict=True)}


def _level_rows(levels_df: pd.DataFrame, requests_df: pd.DataFrame) -> list[dict[str, Any]]:
    known = {int(r["level"]): dict(r) for _, r in levels_df.iterrows()}
    for lvl in sorted(set(requests_df["level"].astype(int)) - set(known)):
        known[lvl] = {"level": lvl, "kind": None, "value": None, "duration_s": None}
    return [known[k] for k in sorted(known)]


def _str(x: Any) -> str | None:
    return x if isinstance(x, str) else None


class _Values:
    """Per-request metric arrays for the whole frame, computed once and masked per block."""

    def __init__(
        self, df: pd.DataFrame, chunks: m.ChunkArrays, slos: Sequence[Mapping[str, Any]]
    ) -> None:
        self.df = df
        # what a block's token agreement and connections read: a block masks these few columns,
        # not the whole frame (16 blocks of 100k rows: 0.2 s of copying)
        self.block_columns = df[
            [c for c in (*m.TOKEN_AGREEMENT_COLUMNS, *m.CONNECTION_COLUMNS) if c in df.columns]
        ]
        self.chunks = chunks
        self.ok = (df["outcome"] == "ok").to_numpy()
        self.steady = (df["phase"] == "steady").to_numpy()
        self.per_request = {
            name: m.per_request_values(df, name)
            for name in ("ttft_ms", "tpot_ms", "e2e_ms", *EXTRA_LATENCIES, "output_speed_tps")
        }
        self.kinds = m.failure_kind(df).to_numpy()
        self.switches = ws.switch_kinds(df)  # per adapter: after a switch or steady
        self.times = m.Timeline.from_frame(df)
        self.arrivals = m.Arrivals.of(chunks, self.times)
        self.level = df["level"].to_numpy()
        self.good = m.meets_slos(df, slos, chunks) if slos else None
        self.audio = summary_audio.AudioValues.of(df)  # speech runs only
        # ITL p50/p90/p99 of every level and (level, region), in a few passes over the chunks
        level = df["level"].to_numpy()
        region = df["region"].astype(object).to_numpy()
        labels, n_labels, sets = itl_spectra.level_region_labels(
            self.ok & self.steady,
            level,
            region,
            sorted(set(level.tolist())),
            sorted(set(region.tolist())),
        )
        q = list(SUMMARY_PERCENTILES)
        self.itl = itl_spectra.itl_group_spectra(chunks, labels, n_labels, sets, q, resamples=0)
        # the server's own timings, where it reported them (a few engines do)
        self.server_prefill = m.server_prefill_ms(df)
        self.server_per_token = m.server_itl_ms(df)
        timed = np.isfinite(self.server_per_token)
        self.has_server = bool(timed.any() or np.isfinite(self.server_prefill).any())
        self.itl_timed: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
        if self.has_server:  # client ITL over the requests the server timed per token
            labels, n_labels, sets = itl_spectra.level_region_labels(
                self.ok & self.steady & timed,
                level,
                region,
                sorted(set(level.tolist())),
                sorted(set(region.tolist())),
            )
            self.itl_timed = itl_spectra.itl_group_spectra(
                chunks, labels, n_labels, sets, [50.0], resamples=0
            )


def _block(
    v: _Values,
    rows: np.ndarray,
    scope: np.ndarray,
    level: Mapping[str, Any],
    key: str,
) -> dict[str, Any]:
    """One level's numbers over `rows` (its requests, of one region or all). Throughput counts
    every request of `scope` (the region, or all) by when its tokens arrived or it completed:
    under `between_levels = "overlap"` another level's stragglers produced them too."""
    df = v.df
    win = m.level_window(level, df, rows)
    window = win.seconds
    sub = v.block_columns[rows]
    lat = rows & v.ok & v.steady
    out: dict[str, Any] = {
        "requests_ok": int((rows & v.ok).sum()),
        "requests_failed": int((rows & ~v.ok).sum()),
        "request_rate": _num(m.request_rate(v.times, win, scope)),
        "output_tokens_per_s": _num(m.output_token_rate(v.arrivals, win, scope)),
    }
    samples: dict[str, int] = {}
    for name in ("ttft_ms", "tpot_ms"):
        vals = v.per_request[name][lat]
        out[name] = _pcts(vals)
        samples[name] = int(np.isfinite(vals).sum())
    if key in v.itl:
        itl_values, _, _, itl_n = v.itl[key]
    else:  # a level no request reached (planned, then the run died or sent nothing)
        itl_values, itl_n = np.full(len(SUMMARY_PERCENTILES), np.nan), 0
    out["itl_ms"] = _pct_dict(itl_values)
    samples["itl_ms"] = int(itl_n)
    vals = v.per_request["e2e_ms"][lat]
    out["e2e_ms"] = _pcts(vals)
    samples["e2e_ms"] = int(np.isfinite(vals).sum())
    for name in EXTRA_LATENCIES:
        vals = v.per_request[name][lat]
        out[name] = _pcts(vals)
        samples[name] = int(np.isfinite(vals).sum())
    out["output_speed_tps"] = _pcts(v.per_request["output_speed_tps"][lat])
    out["samples"] = samples
    out["steady_window_s"] = _num(window) if window > 0 else None
    kinds = pd.Series(v.kinds[rows & ~v.ok])
    out["failures_by_kind"] = {str(k): int(c) for k, c in kinds.value_counts().sort_index().items()}
    n_all = int(rows.sum())
    out["error_rate"] = _num(out["requests_failed"] / n_all) if n_all else None
    if v.good is not None:
        done = m.completed_in(v.times, win, scope)
        out["goodput"] = _num(int((v.good & done).sum()) / window) if window > 0 else None
        steady = rows & v.steady
        out["slo_attainment"] = _num(v.good[steady].mean()) if steady.any() else None
    own = m.in_flight_mean(v.times, win, rows)
    others = scope & (v.level != int(level["level"]))
    out["in_flight_mean"] = _num(own)
    out["other_levels_in_flight_mean"] = _num(m.in_flight_mean(v.times, win, others))
    out["other_levels_in_flight_max"] = m.in_flight_max(v.times, win, others) if window > 0 else 0
    if level.get("kind") == "concurrency":
        out["achieved"] = _num(own)
    else:
        sent = rows & v.times.sent
        sent &= (v.times.sent_at >= win.start_ns) & (v.times.sent_at < win.end_ns)
        out["achieved"] = _num(int(sent.sum()) / window) if window > 0 else None
    out["audio"] = None
    if v.audio is not None:
        done = m.completed_in(v.times, win, scope)
        out["audio"] = summary_audio.audio_block(
            v.audio, df, lat, done, window, out["itl_ms"], _pcts, _num
        )
    # per LoRA adapter, and with vs without the shared prefix (analysis.stats.workload_split)
    out["adapters"] = ws.adapter_blocks(
        df, v.per_request, v.switches, v.times, v.arrivals, win, rows, scope
    )
    out["prefix_cache"] = ws.prefix_block(df, v.per_request["ttft_ms"], rows)
    out["token_agreement"] = m.token_agreement(sub)
    out["connections"] = _connections(sub)
    out["client_vs_server"] = None
    if v.has_server:
        itl_values, _, _, itl_n = v.itl_timed[key]
        out["client_vs_server"] = m.client_vs_server(
            v.per_request["ttft_ms"][lat],
            v.server_prefill[lat],
            (float(itl_values[0]), int(itl_n)),
            v.server_per_token[lat],
        )
    return out


def _connections(sub: pd.DataFrame) -> dict[str, Any]:
    """New-connection share, set-up percentiles (ms) and re-sends of one block's requests."""
    recorded = m.connection_recorded(sub)
    connect = m.connect_ms(sub)[recorded]
    return {
        "recorded": int(recorded.sum()),
        "new_share": _num(m.new_connection_share(sub)),
        "opened": int(np.isfinite(connect).sum()),
        "connect_ms": _pcts(connect),
        "resent": m.resent_total(sub),
    }


def load_flags(
    level: Mapping[str, Any], df: pd.DataFrame, rows: np.ndarray, spec: Any
) -> list[str]:
    """Why the level did not deliver the load it claims to measure: short of what its schedule
    asked (analysis.verdicts.delivered: for a rate, the schedule's own arrivals in the steady
    window, not its mean; for a concurrency, the mean in flight) by more than
    `[validity] max_load_shortfall` (default 5%), or requests demanded and not sent (e.g.
    refused by `max_concurrency`; not those peakload stopped: loadgen.results.reasons). Closed loop
    with think time is not judged by in-flight (users thinking are not in flight)."""
    flags = []
    d = level_delivered(level, df, rows, spec)
    if d.short:
        flags.append(d.reason().split(": ", 1)[1])
    unsent = rows & (df["outcome"] == "not_sent").to_numpy()
    unsent &= ~df["error_phase"].isin(tuple(STOPPED_BY_PEAKLOAD)).to_numpy()
    if unsent.any():
        why = df.loc[unsent, "error_phase"].fillna("unknown").value_counts().sort_index()
        flags.append(
            f"{int(unsent.sum())} requests not sent ("
            + ", ".join(f"{k}: {v}" for k, v in why.items())
            + ")"
        )
    return flags


def level_summary(
    requests_df: pd.DataFrame,
    levels_df: pd.DataFrame,
    runs_row: Mapping[str, Any] | pd.Series,
    *,
    chunks: m.ChunkArrays | None = None,
) -> dict[str, Any]:
    """The run summary, one entry per level, with a per-region breakdown of the same numbers.

    Shape: `{"run_id", "valid", "invalid_reasons", "levels": [{"level", "requests_ok",
    "requests_failed", "request_rate", "output_tokens_per_s", "ttft_ms": {"p50","p90","p99"},
    "tpot_ms", "itl_ms", "e2e_ms", ...extras}]}` plus "name", "status", "definitions".
    TTFT is from send (first_token_ns - sent_ns); ITL is per token (a chunk of k tokens after a
    gap g counts k samples of g/k). Latencies cover ok requests in the steady phase; counts
    cover every phase. Throughput is from arrivals: output tokens/s = tokens that arrived inside
    the level's stored steady window (a chunk of k tokens counts k at its arrival) / window;
    req/s = ok requests that completed inside it / window (metrics.output_token_rate,
    metrics.request_rate), every shard and region pooled in the one window.
    Extras per level: "kind", "value" (configured load), "achieved" (req/s sent inside the
    window for open loop; time-weighted mean of the level's own requests in flight for
    concurrency), "in_flight_mean", "other_levels_in_flight_mean"/"_max" (other levels'
    requests in flight during the window), "flags" (`load_flags`: the level did not deliver
    its configured load, and why), "failures_by_kind", "goodput" and "slo_attainment" when
    the run has SLOs, "connections" {"recorded", "new_share", "opened", "connect_ms",
    "resent"}, "client_vs_server" (analysis.metrics.client_vs_server; None without server
    timings), "regions" {name: same metrics}. ms throughout. Run-wide: "resent" (re-sends,
    None when not recorded) and "server_timings" (whether any request has them).
    """
    run = dict(runs_row)
    spec = run.get("spec") or {}
    slos = list(spec.get("slos") or []) if isinstance(spec, Mapping) else []
    df = requests_df.reset_index(drop=True)
    ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
    if ch.n_requests != len(df):
        raise ValueError(f"chunks cover {ch.n_requests} requests, the frame has {len(df)}")
    vals = _Values(df, ch, slos)
    level_col = df["level"].to_numpy()
    region_col = df["region"].to_numpy()
    in_region = {r: region_col == r for r in set(region_col)}  # once, not once per level
    levels_out = []
    for level in _level_rows(levels_df, df):
        rows = level_col == int(level["level"])
        entry: dict[str, Any] = {
            "level": int(level["level"]),
            "kind": level.get("kind"),
            "value": _num(level.get("value")),
            "between_levels": _str(level.get("between_levels")),
        }
        lv = int(level["level"])
        everyone = np.ones(len(df), dtype=bool)
        entry.update(_block(vals, rows, everyone, level, f"{lv}|all"))
        entry["regions"] = {
            str(r): _block(vals, rows & in_region[r], in_region[r], level, f"{lv}|{r}")
            for r in sorted(set(region_col[rows]))
        }
        entry["flags"] = load_flags(level, df, rows, spec)
        levels_out.append(entry)
    reasons = run.get("invalid_reasons") or []
    resent = [lv["connections"]["resent"] for lv in levels_out]
    return {
        "run_id": str(run.get("run_id", "")),
        "name": run.get("name"),
        "status": run.get("status"),
        "valid": None
        if run.get("valid") is None or pd.isna(run.get("valid"))
        else bool(run["valid"]),
        "invalid_reasons": list(reasons),
        "slos": slos,
        "percentile_method": m.PERCENTILE_METHOD,
        "definitions": DEFINITIONS,
        "resent": None if all(r is None for r in resent) else sum(r or 0 for r in resent),
        "server_timings": vals.has_server,
        # n > 1 (loadgen/results/choices.py): the most choices a request's chunks name; None for n =
        # 1
        "choices": None if ch.choices is None else int(ch.choices.max()) + 1,
        "adapters": ws.adapters_of(df),  # [[workload.adapters]] asked for; [] for none
        "levels": levels_out,
        "search": _search(run.get("search")),
    }


def _search(x: Any) -> dict[str, Any] | None:
    if isinstance(x, str):
        x = json.loads(x)
    return dict(x) if isinstance(x, Mapping) else None


def summarize_run(conn: Any, run_id: str) -> dict[str, Any]:
    """Load a stored run (psycopg connection; one binary COPY, analysis.store.fastload) and return
    `level_summary` for it."""
    from analysis.store.fastload import load_requests_fast
    from analysis.store.load import load_levels, load_run

    run = load_run(conn, run_id)
    df, chunks = load_requests_fast(conn, run_id)
    return level_summary(df, load_levels(conn, run_id), run, chunks=chunks)
