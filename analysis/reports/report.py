"""A run's report as data: every number the HTML report, the PNG figures and `--json` show
(summary, percentile curves, frontier, time series per region, a sample timeline of requests,
test-matrix labels, validity, SLA verdicts). Never prompts, responses or keys.
Rendering lives in analysis/reports/render.py.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import psycopg

from analysis import metrics as m
from analysis.metrics.audio import has_audio
from analysis.reports import cost as acost
from analysis.reports.summary import level_summary
from analysis.stats import frontier as fr
from analysis.stats import percentiles as pc
from analysis.stats import prefix_counters, throughput
from analysis.stats import regions as rg
from analysis.stats import server_metrics as srv
from analysis.store import buckets, cache, derived, load
from analysis.store.imports import load_import
from analysis.store.probe import load_probe
from analysis.store.summaries import load_summary, store_summary
from analysis.verdicts import sla, verdict
from analysis.verdicts.max_load import max_load_meeting_slos

REPORT_VERSION = 1
_log = logging.getLogger(__name__)
TIMELINE_SAMPLE = 40
# the report's defaults, which `run` and `submit` keep for a run at its end (keep_default_results)
RESAMPLES = 500
SEED = 0
FRONTIER_METRIC = "ttft_ms"
FRONTIER_PERCENTILE = 99.0
# the chunks from which a run's end keeps them: computing the curves and frontier took 50 ms at
# 136 chunks, 0.24 s at 0.7M and 2.6-3.6 s at 127M here (bench/RESULTS.md, "Compression on a
# Timescale-licensed server"), so below this a report computes them when asked
KEEP_AT_END_MIN_CHUNKS = 1_000_000


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf to None, numpy scalars to Python, timestamps to ISO strings."""
    if isinstance(x, Mapping):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_clean(v) for v in x.tolist()]
    if isinstance(x, pd.Timestamp):
        return None if pd.isna(x) else x.isoformat()
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        f = float(x)
        return f if math.isfinite(f) else None
    if x is pd.NaT or x is pd.NA:
        return None
    if hasattr(x, "isoformat"):
        return x.isoformat()
    return x


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [_clean(r) for r in df.to_dict(orient="records")]


def _ns(col: pd.Series) -> np.ndarray:
    """A time column as integers that sort as its times do (NaT first)."""
    return pd.to_datetime(col, utc=True).dt.tz_convert(None).to_numpy().view(np.int64)


def timeline_sample(
    df: pd.DataFrame,
    chunks: m.ChunkArrays,
    run_start: pd.Timestamp | None,
    n: int = TIMELINE_SAMPLE,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Up to `n` requests (a seeded sample, the same whatever order the store returned rows in;
    ordered by schedule): each with its scheduled time (s from the run's start, wall clock),
    and from there (s, monotonic): sent, first token, end, and every chunk's arrival (send +
    chunk offset)."""
    if df.empty:
        return []
    # numbers that sort as the columns do (no Python object per row: a million rows' times as
    # Timestamps and shard ids as strings took 5 s)
    order = np.lexsort(
        (df["idx"].to_numpy(), pc.sorted_codes(df["shard_id"])[0], _ns(df["scheduled_at"]))
    )
    rng = np.random.default_rng(seed)
    pick = order[np.sort(rng.choice(len(df), size=min(n, len(df)), replace=False))]
    sub = df.iloc[pick]
    kinds = m.failure_kind(sub).to_numpy()
    t0 = (
        run_start if run_start is not None and not pd.isna(run_start) else sub["scheduled_at"].min()
    )
    out = []
    for j, (row, (_, r)) in enumerate(zip(pick, sub.iterrows(), strict=True)):
        sent = r["sent_ns"] / 1e9 if np.isfinite(r["sent_ns"]) else None
        a, b = int(chunks.ptr[row]), int(chunks.ptr[row + 1])
        offs = np.asarray(chunks.offsets_us[a:b], dtype=np.float64)
        out.append(
            _clean(
                {
                    "shard_id": str(r["shard_id"]),
                    "idx": int(r["idx"]),
                    "region": str(r["region"]),
                    "level": int(r["level"]),
                    "outcome": str(kinds[j]),
                    "scheduled_s": (r["scheduled_at"] - t0).total_seconds(),
                    "sent_s": sent,
                    "first_token_s": r["first_token_ns"] / 1e9,
                    "end_s": r["end_ns"] / 1e9,
                    "chunk_s": (r["sent_ns"] / 1e9 + offs / 1e6).tolist()
                    if sent is not None
                    else [],
                    "chunk_tokens": np.asarray(chunks.tokens[a:b]).tolist(),
                }
            )
        )
    return out


def validity_flags(run: Mapping[str, Any], shards: pd.DataFrame) -> dict[str, Any]:
    """The run's validity, its reasons, and per-shard flags (invalid shards, clock uncertainty,
    start skew, shards that did not complete)."""
    flags: dict[str, Any] = {
        "valid": None
        if run.get("valid") is None or pd.isna(run.get("valid"))
        else bool(run["valid"]),
        "status": run.get("status"),
        "status_reason": run.get("status_reason"),
        "invalid_reasons": list(run.get("invalid_reasons") or []),
        "shards": [],
    }
    for _, s in shards.iterrows():
        flags["shards"].append(
            _clean(
                {
                    "shard_id": s["shard_id"],
                    "region": s["region"],
                    "state": s["state"],
                    "valid": None if pd.isna(s["valid"]) else bool(s["valid"]),
                    "invalid_reasons": list(s["invalid_reasons"] or []),
                    "clock_uncertainty_ms": None
                    if pd.isna(s["clock_uncertainty_ns"])
                    else s["clock_uncertainty_ns"] / 1e6,
                    "start_skew_ms": None
                    if pd.isna(s["start_skew_ns"])
                    else s["start_skew_ns"] / 1e6,
                    "requests_scheduled": s["requests_scheduled"],
                    "records_written": s["records_written"],
                }
            )
        )
    return flags


def kept_summary(
    conn: psycopg.Connection[Any],
    run: Mapping[str, Any],
    df: pd.DataFrame,
    levels: pd.DataFrame,
    chunks: m.ChunkArrays,
) -> dict[str, Any]:
    """The run's level summary as stored for an ended run (analysis.store.summaries), else
    computed and stored for the next reader (a store that refuses the write costs only that)."""
    stored = load_summary(conn, run)
    if stored is not None:
        return stored
    summary = level_summary(df, levels, run, chunks=chunks)
    try:
        store_summary(conn, run, summary)
    except psycopg.Error as exc:
        _log.warning("run %s: its summary was not stored (%s)", run["run_id"], exc)
    return summary


def kept_curves(
    kept: derived.RunResults,
    df: pd.DataFrame,
    chunks: m.ChunkArrays | None,
    metrics: tuple[str, ...],
    resamples: int,
    seed: int,
) -> pd.DataFrame:
    """analysis.stats.percentiles.percentile_curves of the run, kept under these parameters."""
    return kept.get(
        "percentile_curves",
        {"metrics": metrics, "resamples": resamples, "seed": seed},
        lambda: pc.percentile_curves(df, chunks, metrics=metrics, resamples=resamples, seed=seed),
    )


def kept_frontier(
    kept: derived.RunResults,
    df: pd.DataFrame,
    levels: pd.DataFrame,
    chunks: m.ChunkArrays | None,
    metric: str,
    percentile: float,
    resamples: int,
    seed: int,
) -> pd.DataFrame:
    """analysis.stats.frontier.frontier_points of the run, kept under these parameters."""
    return kept.get(
        "frontier_points",
        {"metric": metric, "percentile": percentile, "resamples": resamples, "seed": seed},
        lambda: fr.frontier_points(
            df,
            levels,
            metric=metric,
            percentile=percentile,
            chunks=chunks,
            resamples=resamples,
            seed=seed,
        ),
    )


def curve_metrics(df: pd.DataFrame) -> tuple[str, ...]:
    """The metrics of a run's percentile curves: a speech run's include its time to first
    audio byte and real-time factor."""
    return (*pc.DEFAULT_CURVES, *(("ttfab_ms", "audio_rtf") if has_audio(df) else ()))


def keep_default_results(
    conn: psycopg.Connection[Any],
    run_id: str,
    df: pd.DataFrame,
    levels: pd.DataFrame,
    chunks: m.ChunkArrays | None,
    min_chunks: int | None = None,
) -> bool:
    """Compute and keep in the store (analysis.store.derived) the curves and frontier a report
    of the ended run shows by default, so its first report or benchmark on any machine reads
    them; what `run` and `submit` do at a run's end, for a run of at least `min_chunks` chunks
    (default KEEP_AT_END_MIN_CHUNKS: a smaller one's are computed when asked, in well under a
    second). False, and nothing kept, for a smaller run or one still changing."""
    least = KEEP_AT_END_MIN_CHUNKS if min_chunks is None else min_chunks
    if (chunks.offsets_us.size if chunks is not None else len(df)) < least:
        return False
    kept = derived.RunResults.of(conn, run_id)
    if kept.prefix is None:
        return False
    kept_curves(kept, df, chunks, curve_metrics(df), RESAMPLES, SEED)
    kept_frontier(kept, df, levels, chunks, FRONTIER_METRIC, FRONTIER_PERCENTILE, RESAMPLES, SEED)
    return True


def build_report(
    conn: psycopg.Connection[Any],
    run_id: str,
    *,
    claims: sla.ClaimsFile | None = None,
    frontier_metric: str = FRONTIER_METRIC,
    frontier_percentile: float = FRONTIER_PERCENTILE,
    bucket_s: float | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """Everything in the report for one stored run (JSON-safe). Latencies ms, rates per s."""
    run = load.load_run(conn, run_id)
    # an ended run from the local cache (analysis.store.cache), else one binary COPY
    # (analysis.store.fastload, then cached): fast on big runs; never loads content columns
    fp = cache.fingerprint(conn, run_id)
    df, chunks, _hit = cache.load_fingerprinted(conn, run_id, fp, parallel=1)
    levels = load.load_levels(conn, run_id)
    shards = load.load_shards(conn, run_id)
    summary = kept_summary(conn, run, df, levels, chunks)
    # an ended run's curves and frontier are kept on local disk and in the store
    # (analysis.store.derived): a later report of the run reads them instead of computing them
    kept = derived.RunResults(run_id, fp, store=conn)
    curves = kept_curves(kept, df, chunks, curve_metrics(df), resamples, seed)
    points = kept_frontier(
        kept, df, levels, chunks, frontier_metric, frontier_percentile, resamples, seed
    )
    knee_i = fr.knee(points["output_tokens_per_s"], points["latency"]) if len(points) else None
    slos = list((run.get("spec") or {}).get("slos") or [])
    duration = run.get("duration_s")
    if bucket_s is None:  # about 120 buckets over the run, at least 1 s
        span = float(duration) if duration and np.isfinite(duration) else 60.0
        bucket_s = max(1.0, math.ceil(span / 120.0))
    ts = throughput.with_arrival_throughput(
        buckets.timeseries(conn, run_id, bucket_s, requests=False), df, chunks, bucket_s
    )
    server = srv.server_section(conn, run, df, summary["levels"], bucket_s)
    judged = verdict.judge_claims(run, df, claims, chunks=chunks, levels=levels) if claims else None
    verdicts = judged.verdicts if judged else []
    labels = run.get("labels") or {}
    out: dict[str, Any] = _clean(
        {
            "report_version": REPORT_VERSION,
            "run": {
                "run_id": run["run_id"],
                "name": run["name"],
                "mode": run["mode"],
                "api": run["api"],
                "target_url": run["target_url"],
                "model": run["model"],
                "schedule_name": run.get("schedule_name"),
                "created_at": run["created_at"],
                "started_at": run["started_at"],
                "ended_at": run["ended_at"],
                "duration_s": duration,
                "requests": run["requests"],
                "errors": run["errors"],
                "requests_scheduled": run.get("requests_scheduled"),
            },
            "labels": labels,
            "validity": validity_flags(run, shards),
            "summary": summary,
            "error_rates": m.error_rates(df) if len(df) else {},
            "token_agreement": m.token_agreement(df) if len(df) else {},
            "curves": _records(curves),
            "frontier": {
                "metric": frontier_metric,
                "percentile": frontier_percentile,
                "points": _records(points),
                "pareto": _records(fr.pareto_frontier(points)) if len(points) else [],
                "knee_level": int(points["level"].iloc[knee_i]) if knee_i is not None else None,
                "knee_method": "Kneedle: max of x_n - y_n, throughput vs latency normalised",
                "max_load_meeting_slos": max_load_meeting_slos(df, levels, slos, chunks=chunks)
                if slos
                else None,
            },
            "timeseries": {"bucket_s": bucket_s, "rows": _records(ts)},
            # the server's own series on the same buckets, the client TTFT beside them, and
            # the diagnosis they support (analysis.stats.server_metrics)
            "server": {
                "metrics": server["metrics"],
                "rows": _records(server["rows"]),
                "client_ttft": _records(server["client_ttft"]),
                "levels": {str(k): v for k, v in server["levels"].items()},
                "diagnosis": server["diagnosis"],
            },
            # vLLM's prefix-cache counters over each level's steady span (where scraped)
            "prefix_cache_server": prefix_counters.level_prefix_counters(conn, run_id, df),
            "cost": acost.run_cost(run, df, summary["levels"]),
            "regions_network": rg.region_breakdown(df, rg.shard_probes(conn, run_id)),
            "timeline": timeline_sample(df, chunks, run.get("started_at"), seed=seed),
            # the run against its own spec, as `peakload run` exited
            # (analysis.verdicts.verdict.judge_run)
            "verdict": verdict.judge_run(run, df, levels, chunks=chunks).to_json(),
            "sla": [v.to_json() for v in verdicts],
            # the run's state first, as `peakload sla` exits
            # (analysis.verdicts.verdict.judge_claims)
            "sla_exit_code": int(judged.code) if judged else None,
            "sla_reason": judged.reason if judged else None,
        }
    )
    out["probe"] = load_probe(conn, run_id)  # the target's handling of the run's parameters
    out["imported"] = load_import(conn, run_id)  # another tool's results: what they held
    return out
