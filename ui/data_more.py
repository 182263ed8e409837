"""Cached data access for the Compare (percentile curves, frontiers, the change table against a
baseline), SLA (verdicts), Nightly (a schedule's history with change points) and Live (progress
from ticks) pages. Same conventions as ui/data.py, whose raw frames it shares: results cached
with a TTL keyed by each run's version, every number from analysis/.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from analysis import metrics as m
from analysis.store import load as al
from analysis.verdicts import nightly as anightly
from analysis.verdicts import sla as asla
from ui import derive
from ui.data import (
    RESULT_TTL_S,
    RUNS_TTL_S,
    choices,
    chunks,
    levels,
    requests,
    runs,
    runs_for,
    store,
    validity_word,
    version,
)

LIVE_TTL_S = 1


# ---------------------------------------------------------------- several runs


def versions(run_ids: Sequence[str]) -> tuple[str, ...]:
    return tuple(version(r) for r in run_ids)


def compare_spectra(run_ids: Sequence[str], metric: str) -> pd.DataFrame:
    """One percentile curve per run (ok, steady requests, all levels pooled)."""
    return _compare_spectra(tuple(run_ids), versions(run_ids), metric)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _compare_spectra(
    run_ids: tuple[str, ...], versions: tuple[str, ...], metric: str
) -> pd.DataFrame:
    names = choices(runs_for(run_ids))
    parts = []
    for rid in run_ids:
        df = requests(rid)
        v = derive.metric_samples(df, metric, derive.latency_rows(df), chunks(rid))
        parts.append(derive.curve(v, names.get(rid, rid)))
    parts = [p for p in parts if not p.empty]
    return (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=derive.CURVE_COLUMNS)
    )


def frontier(run_ids: Sequence[str], metric: str, percentile: float) -> pd.DataFrame:
    """Throughput against a latency percentile per (run, level) (analysis.stats.frontier), with the
    Pareto points and the knee marked."""
    return _frontier(tuple(run_ids), versions(run_ids), metric, percentile)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _frontier(
    run_ids: tuple[str, ...], versions: tuple[str, ...], metric: str, percentile: float
) -> pd.DataFrame:
    per_run = {r: (requests(r), levels(r), chunks(r)) for r in run_ids}
    return derive.frontier(per_run, choices(runs_for(run_ids)), metric, percentile)


CHANGE_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


def changes(run_ids: Sequence[str], baseline: str, with_itl: bool = False) -> pd.DataFrame:
    """Each run against the baseline per metric, level and p50/p90/p99 (analysis.verdicts.compare);
    ITL per token only when asked (one sample per token: slow on large runs)."""
    return _changes(tuple(run_ids), versions(run_ids), baseline, with_itl)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _changes(
    run_ids: tuple[str, ...], versions: tuple[str, ...], baseline: str, with_itl: bool
) -> pd.DataFrame:
    frames = {r: requests(r) for r in run_ids}
    if with_itl:  # analysis.verdicts.compare reads ITL from the frame's chunk columns
        frames = {r: with_chunk_columns(df, chunks(r)) for r, df in frames.items()}
    metrics = (*CHANGE_METRICS, "itl_ms") if with_itl else CHANGE_METRICS
    return derive.changes(frames, choices(runs_for(run_ids)), baseline, metrics)


def with_chunk_columns(df: pd.DataFrame, ch: m.ChunkArrays) -> pd.DataFrame:
    """The frame with `chunk_offsets_us`/`chunk_tokens` columns (views into the flat arrays)."""
    cut = ch.ptr[1:-1]
    out = df.copy()
    out["chunk_offsets_us"] = pd.Series(np.split(ch.offsets_us, cut), index=df.index, dtype=object)
    out["chunk_tokens"] = pd.Series(np.split(ch.tokens, cut), index=df.index, dtype=object)
    return out


# ---------------------------------------------------------------- nightly


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def schedules() -> list[str]:
    """Schedule names that have runs, alphabetically."""
    df = runs(limit=5000)
    names = df["schedule_name"].dropna().unique().tolist()
    return sorted(str(n) for n in names)


NIGHTLY_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttfat_ms")


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def nightly(
    schedule: str,
    metric: str,
    percentile: float,
    threshold_pct: float = anightly.DEFAULT_THRESHOLD_PCT,
    include_invalid: bool = False,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A schedule's history, oldest first, and its verdict, as `peakload nightly` judges it
    (analysis.verdicts.nightly.judge_schedule): per run the pooled `percentile` of `metric` (ms),
    with `change_point` true where a new mean starts."""
    with store().conn() as c:
        hist, result = anightly.judge_schedule(
            c,
            schedule,
            threshold_pct=threshold_pct,
            include_invalid=include_invalid,
            metric=metric,
            percentile=percentile,
        )
    hist["change_point"] = [bool(r["change_point"]) for r in result["runs"]]
    hist["valid"] = [validity_word(v) for v in hist["valid"]]
    return hist, result


def nightly_links(history: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per run of a history, newest first."""
    if history.empty:
        return []
    out = history.sort_values("created_at", ascending=False)
    cols = ["run_id", "name", "created_at", "valid", "change_point"]
    return [{str(k): v for k, v in r.items()} for r in out[cols].to_dict("records")]


# ---------------------------------------------------------------- SLA


def parse_claims(text: str, where: str) -> asla.ClaimsFile:
    """A claims TOML (analysis.verdicts.sla); SpecError names the file and the field."""
    import tomllib

    from loadgen.errors import SpecError

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"not valid TOML: {exc}", where=where) from None
    return asla.parse_claims(data, where=where)


def verdicts(run_id: str, claims_text: str, where: str) -> pd.DataFrame:
    """analysis.verdicts.sla.evaluate of the claims against one run's requests, one row per
    claim."""
    return _verdicts(run_id, version(run_id), claims_text, where)


@st.cache_data(ttl=RESULT_TTL_S, show_spinner=False)
def _verdicts(run_id: str, version: str, claims_text: str, where: str) -> pd.DataFrame:
    claims = parse_claims(claims_text, where)
    out = asla.evaluate(requests(run_id), claims, chunks=chunks(run_id))
    return pd.DataFrame([v.to_json() for v in out])


# ---------------------------------------------------------------- live


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def running_runs() -> dict[str, str]:
    """Runs with status `running` (newest first): run_id -> label."""
    return choices(runs(status="running", limit=50))


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def run_status(run_id: str) -> dict[str, Any]:
    """The run's row, fresh within a second (for the Live page)."""
    with store().conn() as c:
        return al.load_run(c, run_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def live_series(run_id: str) -> pd.DataFrame:
    with store().conn() as c:
        return al.timeseries(c, run_id, 1.0)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def live_regions(run_id: str) -> pd.DataFrame:
    """Per region, from the ticks so far: started, completed, errors, output tokens, in flight
    now (last tick), seconds covered, and the generator's worst loop lag (ms)."""
    with store().conn() as c:
        t = al.load_ticks(c, run_id)
    cols = [
        "region",
        "seconds",
        "started",
        "completed",
        "errors",
        "output_tokens",
        "in_flight",
        "loop_lag_ms_max",
    ]
    if t.empty:
        return pd.DataFrame(columns=cols)
    last = t[t["t"] == t.groupby("region")["t"].transform("max")]
    g = t.groupby("region").agg(
        seconds=("t", "nunique"),
        started=("started", "sum"),
        completed=("completed", "sum"),
        errors=("errors", "sum"),
        output_tokens=("output_tokens", "sum"),
        loop_lag_ms_max=("loop_lag_ms_max", "max"),
    )
    g["in_flight"] = last.groupby("region")["in_flight"].sum()
    return g.reset_index()[cols]
