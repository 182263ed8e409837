"""Per-request latencies (ms) from the request frame: TTFT, TPOT, E2E, output speed."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics.base import (
    FloatArray,
    float_column,
)
from loadgen.results import formulas
from loadgen.results.choices import has_choices, request_tpot_ms


def of_frame(df: pd.DataFrame, metric: formulas.RequestMetric) -> FloatArray:
    """A per-request metric (loadgen.results.formulas) of every row of `df`, from its stored
    columns."""
    return metric.python(*(float_column(df, c) for c in metric.columns))


def ttft_ms(df: pd.DataFrame) -> FloatArray:
    """TTFT from send (the TTFT the summary reports): loadgen.results.formulas.ttft_ms."""
    return of_frame(df, formulas.TTFT)


def ttft_sched_ms(df: pd.DataFrame) -> FloatArray:
    """TTFT from the scheduled time (shows coordinated omission):
    loadgen.results.formulas.ttft_sched_ms."""
    return of_frame(df, formulas.TTFT_SCHED)


def ttfat_ms(df: pd.DataFrame) -> FloatArray:
    """Time to first answer token from send: loadgen.results.formulas.ttfat_ms."""
    return of_frame(df, formulas.TTFAT)


def tpot_ms(df: pd.DataFrame) -> FloatArray:
    """Time per output token after the first (NaN for one-token answers):
    loadgen.results.formulas.tpot_ms; a request with `n > 1` choices (`chunk_choices`) the mean over
    its choices of each choice's own TPOT (loadgen.results.choices.request_tpot_ms)."""
    out = of_frame(df, formulas.TPOT)
    if "choice_tpot_ms" in df:  # analysis.store.choiceload's, from the fast loader
        per = df["choice_tpot_ms"].to_numpy(dtype=np.float64)
        return np.where(np.isnan(per), out, per)
    if "chunk_choices" in df and "chunk_offsets_us" in df:
        for i, c in enumerate(df["chunk_choices"]):
            if has_choices(c):
                off = np.asarray(df["chunk_offsets_us"].iloc[i], dtype=np.int64)
                tok = np.asarray(df["chunk_tokens"].iloc[i], dtype=np.int64)
                out[i] = request_tpot_ms(off, tok, np.asarray(c, dtype=np.int64))
    return out


def e2e_ms(df: pd.DataFrame) -> FloatArray:
    """End-to-end latency from send (the E2E reported): loadgen.results.formulas.e2e_ms."""
    return of_frame(df, formulas.E2E)


def e2e_sched_ms(df: pd.DataFrame) -> FloatArray:
    """End-to-end latency from the scheduled time: loadgen.results.formulas.e2e_sched_ms."""
    return of_frame(df, formulas.E2E_SCHED)


def output_speed_tps(df: pd.DataFrame) -> FloatArray:
    """Per-request output speed, tokens/s after the first token (1000 / TPOT_ms):
    loadgen.results.formulas.output_speed_tps."""
    return of_frame(df, formulas.OUTPUT_SPEED)
