"""A run's distinct loads, for judging a claim at each load of a sweep rather than on the
steady requests of all its levels pooled (analysis.verdicts.verdict).

A latency percentile depends on the load: "p99 TTFT < 800 ms" over a sweep of 1 to 64 streams
is read as holding at every load the run applied, and a pool of them is dominated by its
biggest levels (a level of 5,000 requests with 5 over the threshold and one of 50 with 15 over
pass pooled, while the second alone fails). So a claim that names no level is judged at each
load on its own: the run passes only when it passes at every load (an intersection-union test:
no correction is needed on that side), and fails when it fails at one, under Holm over every
fail-side test of the run (analysis.verdicts.fail_family).

A load is a configured (kind, value) pair: levels that ran the same load again are pooled, as
the saturation search pools them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.verdicts import sla
from analysis.verdicts.clusters import TOKEN_METRICS


@dataclass(frozen=True, slots=True)
class Load:
    """One configured load of a run: its levels, kind and value (None: no level row on
    record), and which requests of the frame ran at it."""

    levels: tuple[int, ...]
    kind: str | None
    value: float | None
    rows: np.ndarray

    def label(self) -> str:
        lv = ", ".join(str(i) for i in self.levels)
        where = f"level {lv}" if len(self.levels) == 1 else f"levels {lv}"
        return f"{where}: {self.kind} {self.value:g}" if self.value is not None else where


def run_loads(df: pd.DataFrame, levels: pd.DataFrame | None) -> list[Load]:
    """The run's loads in the order of their first level, from its level rows (grouped by kind
    and configured value), else one per level id among the requests."""
    ids = df["level"].to_numpy() if "level" in df.columns else np.zeros(len(df), dtype=np.int64)
    if levels is not None and len(levels):
        out = []
        kinds = levels["kind"].astype(str).to_numpy()
        values = levels["value"].to_numpy(dtype=np.float64)
        numbers = levels["level"].to_numpy(dtype=np.int64)
        known = [None if np.isnan(v) else float(v) for v in values]  # None: no value (a trace)
        for kind, value in dict.fromkeys(zip(kinds, known, strict=True)):
            same = (kinds == kind) & np.array([v == value for v in known], dtype=bool)
            lv = tuple(sorted(int(x) for x in numbers[same]))
            out.append(Load(lv, str(kind), value, np.isin(ids, lv)))
        return sorted(out, key=lambda load: load.levels[0])
    present = sorted({int(x) for x in pd.unique(ids[pd.notna(ids)])})
    return [Load((i,), None, None, ids == i) for i in present]


def spread_over(claims: Sequence[sla.Claim], loads: Sequence[Load]) -> int:
    """The number of loads each claim naming no level (and not `pooled`) is judged at (1: one
    load, or no such claim)."""
    spread = any(c.level is None and not c.pooled for c in claims)
    return len(loads) if len(loads) > 1 and spread else 1


def claims_at_each_load(
    df: pd.DataFrame,
    claims: Sequence[sla.Claim],
    loads: Sequence[Load],
    *,
    confidence: float,
    chunks: m.ChunkArrays | None = None,
) -> list[sla.ClaimVerdict]:
    """Each claim's verdict: at each load (its label names the load) when the run has more
    than one and the claim names no level, else over the rows it selects (a claim naming a
    level is judged there alone; a `pooled` one on every steady request of the run)."""
    at_each = spread_over(claims, loads) > 1
    spread = [c for c in claims if c.level is None and not c.pooled] if at_each else []
    kept = [c for c in claims if c.level is not None or c.pooled] if spread else list(claims)
    out = sla.evaluate(df, kept, confidence=confidence, chunks=chunks) if kept else []
    if not spread:
        return out
    tokens = any(c.metric in TOKEN_METRICS for c in spread)  # else no chunk is read
    if chunks is None and tokens:
        chunks = m.ChunkArrays.from_frame(df)
    for load in loads:
        part = chunks.take(load.rows) if chunks is not None and tokens else None
        judged = sla.evaluate(df[load.rows], spread, confidence=confidence, chunks=part)
        out += [replace(v, claim=f"{v.claim} @ {load.label()}") for v in judged]
    return out
