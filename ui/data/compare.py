"""The Compare page's data: one percentile curve per run, the throughput-latency frontier,
the change table against a baseline (analysis.verdicts.compare) and each run's cost. Cached with a
TTL keyed by the runs' versions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import streamlit as st

from analysis import metrics as m
from analysis.reports import cost as acost
from analysis.stats import frontier as afr
from ui.data import derive, shared


def preload(run_ids: Sequence[str]) -> None:
    """A run without a kept summary gets its frame and chunk arrays in one load: the frontier
    counts its arrivals (a run with one reads only the frame, until ITL is asked for)."""
    for rid in run_ids:
        if shared.kept_summary(rid) is None:
            shared.preload(rid)


def cost_overview(run_ids: Sequence[str]) -> pd.DataFrame:
    """One row per run (analysis.reports.cost.run_cost): price basis, what it cost, USD per million
    output tokens at its best level's throughput, and the break-even when both prices exist."""
    rows = []
    for rid in run_ids:
        run = shared.run(rid)
        # the levels' throughput (the run's summary, the costliest result on this page) counts
        # only where a price turns it into a cost: a run without one shows no level figure
        priced = acost.cost_basis(acost.cost_spec(run)) is not None
        c = acost.run_cost(
            run, shared.requests(rid), shared.summary(rid)["levels"] if priced else []
        )
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


def compare_spectra(run_ids: Sequence[str], metric: str) -> pd.DataFrame:
    """One percentile curve per run (ok, steady requests, all levels pooled)."""
    return _compare_spectra(tuple(run_ids), shared.versions(run_ids), metric)


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def _compare_spectra(
    run_ids: tuple[str, ...], versions: tuple[str, ...], metric: str
) -> pd.DataFrame:
    names = shared.labels_for(run_ids)
    parts = []
    for rid in run_ids:
        df = shared.requests(rid)
        ch = shared.chunks(rid) if metric == "itl_ms" else None  # per token: the arrays
        v = derive.metric_samples(df, metric, derive.latency_rows(df), ch)
        parts.append(derive.curve(v, names.get(rid, rid)))
    parts = [p for p in parts if not p.empty]
    return (
        pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=derive.CURVE_COLUMNS)
    )


def frontier(run_ids: Sequence[str], metric: str, percentile: float) -> pd.DataFrame:
    """Throughput against a latency percentile per (run, level) (analysis.stats.frontier), with the
    Pareto points and the knee marked."""
    return _frontier(tuple(run_ids), shared.versions(run_ids), metric, percentile)


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def _frontier(
    run_ids: tuple[str, ...], versions: tuple[str, ...], metric: str, percentile: float
) -> pd.DataFrame:
    per_run: dict[str, derive.FrontierRun] = {}
    for r in run_ids:
        df, levels = shared.requests(r), shared.levels(r)
        # throughput as the run's kept summary counted it (the same definitions): the chunk
        # arrays are read only for ITL, for a run without one (counting its arrivals costs
        # less than its whole summary) or for a level it lacks
        kept = shared.kept_summary(r)
        rates = afr.summary_rates(kept) if kept is not None else {}
        every_level = set(df["level"].unique().tolist()) | set(levels["level"].tolist())
        counted = metric == "itl_ms" or not every_level <= set(rates)
        per_run[r] = (df, levels, shared.chunks(r) if counted else None, rates)
    return derive.frontier(per_run, shared.labels_for(run_ids), metric, percentile)


CHANGE_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")


def changes(run_ids: Sequence[str], baseline: str, with_itl: bool = False) -> pd.DataFrame:
    """Each run against the baseline per metric, level and p50/p90/p99 (analysis.verdicts.compare);
    ITL per token only when asked (one sample per token: slow on large runs)."""
    return _changes(tuple(run_ids), shared.versions(run_ids), baseline, with_itl)


@st.cache_data(ttl=shared.RESULT_TTL_S, show_spinner=False)
def _changes(
    run_ids: tuple[str, ...], versions: tuple[str, ...], baseline: str, with_itl: bool
) -> pd.DataFrame:
    frames = {r: shared.requests(r) for r in run_ids}
    if with_itl:  # analysis.verdicts.compare reads ITL from the frame's chunk columns
        frames = {r: with_chunk_columns(df, shared.chunks(r)) for r, df in frames.items()}
    metrics = (*CHANGE_METRICS, "itl_ms") if with_itl else CHANGE_METRICS
    return derive.changes(frames, shared.labels_for(run_ids), baseline, metrics)


def with_chunk_columns(df: pd.DataFrame, ch: m.ChunkArrays) -> pd.DataFrame:
    """The frame with `chunk_offsets_us`/`chunk_tokens` columns (views into the flat arrays)."""
    cut = ch.ptr[1:-1]
    out = df.copy()
    out["chunk_offsets_us"] = pd.Series(np.split(ch.offsets_us, cut), index=df.index, dtype=object)
    out["chunk_tokens"] = pd.Series(np.split(ch.tokens, cut), index=df.index, dtype=object)
    return out
