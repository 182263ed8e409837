"""The per-level run summary (`peakload run --json`, `peakload report`) and its terminal table.
Numbers come from analysis.metrics; this module only selects rows and shapes the result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from analysis import itl_spectra
from analysis import metrics as m

SUMMARY_PERCENTILES = (50.0, 90.0, 99.0)
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
EXTRA_LATENCIES = ("ttft_sched_ms", "ttfat_ms", "e2e_sched_ms")

DEFINITIONS = {
    "ttft_ms": "first_token_ns - sent_ns (from send; first content or reasoning delta), ms",
    "ttft_sched_ms": "first_token_ns (from the scheduled time), ms",
    "ttfat_ms": "first_answer_ns - sent_ns (first answer token, after reasoning), ms",
    "tpot_ms": "(end_ns - first_token_ns) / (output_tokens - 1), requests with >1 token, ms",
    "itl_ms": "per token: a chunk of k tokens after a gap g gives k samples of g/k, ms",
    "e2e_ms": "end_ns - sent_ns (from send), ms",
    "e2e_sched_ms": "end_ns (from the scheduled time), ms",
    "request_rate": "ok steady-phase requests / steady window, req/s",
    "output_tokens_per_s": "output tokens of steady-phase requests / steady window, tokens/s",
    "goodput": "steady requests meeting every SLO / steady window, req/s",
    "latency_scope": "ok requests in the steady phase; percentiles exact, numpy linear",
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


def level_window_s(level: Mapping[str, Any], df: pd.DataFrame, rows: np.ndarray) -> float:
    """The level's steady span from run_levels; without it, first steady schedule to last end."""
    if level.get("duration_s") is not None and _num(level["duration_s"]) is not None:
        return m.steady_window_s(level)
    sel = rows & (df["phase"] == "steady").to_numpy()
    if not sel.any():
        return float("nan")
    t0 = _epoch_ns(df["scheduled_at"])[sel]
    end = t0 + np.nan_to_num(df["end_ns"].to_numpy(dtype=float)[sel]).astype(np.int64)
    return float(end.max() - t0.min()) / 1e9


class _Values:
    """Per-request metric arrays for the whole frame, computed once and masked per block."""

    def __init__(self, df: pd.DataFrame, chunks: m.ChunkArrays) -> None:
        self.df = df
        self.chunks = chunks
        self.ok = (df["outcome"] == "ok").to_numpy()
        self.steady = (df["phase"] == "steady").to_numpy()
        self.per_request = {
            name: m.per_request_values(df, name)
            for name in ("ttft_ms", "tpot_ms", "e2e_ms", *EXTRA_LATENCIES, "output_speed_tps")
        }
        self.kinds = m.failure_kind(df).to_numpy()
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


def _block(
    v: _Values,
    rows: np.ndarray,
    level: Mapping[str, Any],
    slos: Sequence[Mapping[str, Any]],
    key: str,
) -> dict[str, Any]:
    df = v.df
    window = level_window_s(level, df, rows)
    sub = df[rows]
    lat = rows & v.ok & v.steady
    out: dict[str, Any] = {
        "requests_ok": int((rows & v.ok).sum()),
        "requests_failed": int((rows & ~v.ok).sum()),
        "request_rate": _num(m.request_rate(sub, window)),
        "output_tokens_per_s": _num(m.output_token_rate(sub, window)),
    }
    samples: dict[str, int] = {}
    for name in ("ttft_ms", "tpot_ms"):
        vals = v.per_request[name][lat]
        out[name] = _pcts(vals)
        samples[name] = int(np.isfinite(vals).sum())
    itl_values, _, _, itl_n = v.itl[key]
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
    out["steady_window_s"] = _num(window)
    kinds = pd.Series(v.kinds[rows & ~v.ok])
    out["failures_by_kind"] = {str(k): int(c) for k, c in kinds.value_counts().sort_index().items()}
    n_all = int(rows.sum())
    out["error_rate"] = _num(out["requests_failed"] / n_all) if n_all else None
    needs_chunks = any(str(x.get("metric")) == "itl_ms" for x in slos)
    sub_chunks = _sub_chunks(v.chunks, rows) if needs_chunks else None
    good = m.meets_slos(sub, slos, sub_chunks) if slos else None
    if good is not None:
        steady_sub = (sub["phase"] == "steady").to_numpy()
        out["goodput"] = _num(int((good & steady_sub).sum()) / window) if window > 0 else None
        out["slo_attainment"] = _num(good[steady_sub].mean()) if steady_sub.any() else None
    kind = level.get("kind")
    if kind == "concurrency":
        out["achieved"] = _num(_mean_in_flight(df, rows, level, window))
    else:
        sent = rows & v.steady & df["sent_ns"].notna().to_numpy()
        out["achieved"] = _num(int(sent.sum()) / window) if window > 0 else None
    out["token_agreement"] = m.token_agreement(sub)
    return out


def _epoch_ns(ts: pd.Series) -> np.ndarray:
    """UTC timestamps as int64 ns since the epoch."""
    return np.asarray(
        pd.to_datetime(ts, utc=True).dt.tz_localize(None).to_numpy("datetime64[ns]").view(np.int64)
    )


def _mean_in_flight(
    df: pd.DataFrame, rows: np.ndarray, level: Mapping[str, Any], window: float
) -> float | None:
    """Mean requests in flight over the level's steady window: the overlap of every request's
    [sent, end] with [start + warmup, start + duration - cooldown], summed, / window (any
    phase counts: closed-loop users start their first request in the warm-up). The level's
    start is run_levels.started_at, else its first scheduled request."""
    if not window > 0 or not rows.any():
        return None
    sched = _epoch_ns(df["scheduled_at"])[rows]
    start = level.get("started_at")
    t0 = (
        int(pd.Timestamp(start).value)
        if start is not None and not pd.isna(start)
        else int(sched.min())
    )
    ws = t0 + (float(level.get("warmup_s") or 0.0)) * 1e9
    we = ws + window * 1e9
    sent = df["sent_ns"].to_numpy(dtype=float)[rows]
    end = df["end_ns"].to_numpy(dtype=float)[rows]
    ok = np.isfinite(sent) & np.isfinite(end)
    s = sched[ok] + sent[ok]
    e = sched[ok] + end[ok]
    overlap = np.clip(np.minimum(e, we) - np.maximum(s, ws), 0.0, None)
    return float(overlap.sum()) / 1e9 / window


def _sub_chunks(chunks: m.ChunkArrays, rows: np.ndarray) -> m.ChunkArrays:
    idx = np.flatnonzero(rows)
    lengths = np.diff(chunks.ptr)[idx]
    ptr = np.zeros(idx.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    owner = np.repeat(rows, np.diff(chunks.ptr))
    return m.ChunkArrays(chunks.offsets_us[owner], chunks.tokens[owner], ptr)


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
    cover every phase; rates divide by the steady window (duration - warmup - cooldown).
    Extras per level: "kind", "value" (configured load), "achieved" (req/s sent for open loop;
    mean in flight by Little's law for concurrency), "failures_by_kind", "goodput" and
    "slo_attainment" when the run has SLOs, "regions" {name: same metrics}. ms throughout.
    """
    run = dict(runs_row)
    spec = run.get("spec") or {}
    slos = list(spec.get("slos") or []) if isinstance(spec, Mapping) else []
    df = requests_df.reset_index(drop=True)
    ch = chunks if chunks is not None else m.ChunkArrays.from_frame(df)
    if ch.n_requests != len(df):
        raise ValueError(f"chunks cover {ch.n_requests} requests, the frame has {len(df)}")
    vals = _Values(df, ch)
    level_col = df["level"].to_numpy()
    region_col = df["region"].to_numpy()
    levels_out = []
    for level in _level_rows(levels_df, df):
        rows = level_col == int(level["level"])
        entry: dict[str, Any] = {
            "level": int(level["level"]),
            "kind": level.get("kind"),
            "value": _num(level.get("value")),
        }
        lv = int(level["level"])
        entry.update(_block(vals, rows, level, slos, f"{lv}|all"))
        entry["regions"] = {
            str(r): _block(vals, rows & (region_col == r), level, slos, f"{lv}|{r}")
            for r in sorted(set(region_col[rows]))
        }
        levels_out.append(entry)
    reasons = run.get("invalid_reasons") or []
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
        "levels": levels_out,
    }


def summarize_run(conn: Any, run_id: str) -> dict[str, Any]:
    """Load a stored run (psycopg connection) and return `level_summary` for it."""
    from analysis.load import load_levels, load_requests, load_run

    run = load_run(conn, run_id)
    return level_summary(load_requests(conn, run_id), load_levels(conn, run_id), run)


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
    caption += "per token)"
    if reasons:
        caption = "INVALID: " + "; ".join(str(r) for r in reasons) + "\n" + caption
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
    ):
        t.add_column(col, justify="right" if col not in ("level",) else "left")
    for lvl in summary.get("levels", []):
        kind = lvl.get("kind") or ""
        load = f"{kind} {_fmt(lvl.get('value'), 0)} → {_fmt(lvl.get('achieved'), 1)}"
        t.add_row(
            str(lvl["level"]),
            load,
            str(lvl["requests_ok"]),
            str(lvl["requests_failed"]),
            _fmt(lvl.get("request_rate"), 2),
            _fmt(lvl.get("output_tokens_per_s"), 1),
            *(_trio(lvl.get(k) or {}) for k in LATENCIES),
        )
    return t
