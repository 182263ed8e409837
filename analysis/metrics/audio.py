"""The speech workloads' metrics over a request frame (loadgen.results.audio_formulas' per-
request forms) and a level's audio throughput: audio seconds delivered per wall second of the
steady window (speech out), audio seconds transcribed per wall second (speech in). Frames from
runs without audio have NaN audio columns (analysis.store.audioload) or none: NaN everywhere."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.metrics.base import BoolArray, FloatArray
from analysis.metrics.latency import of_frame
from loadgen.results import audio_formulas as af
from loadgen.results.storeformat import AUDIO_COLUMNS


def has_audio(df: pd.DataFrame) -> bool:
    """Whether any request of `df` carries an audio length (a speech run)."""
    return "audio_ms" in df.columns and bool(np.isfinite(df["audio_ms"].to_numpy(float)).any())


def _framed(df: pd.DataFrame) -> pd.DataFrame:
    if all(c in df.columns for c in AUDIO_COLUMNS):
        return df
    out = df.copy()
    for c in AUDIO_COLUMNS:
        if c not in out.columns:
            out[c] = np.nan
    return out


def ttfab_ms(df: pd.DataFrame) -> FloatArray:
    """Time to first audio byte from send, ms: loadgen.results.audio_formulas.ttfab_ms."""
    return of_frame(df, af.TTFAB)


def audio_rtf(df: pd.DataFrame) -> FloatArray:
    """Real-time factor per request (E2E / audio length): audio_formulas.audio_rtf."""
    return of_frame(_framed(df), af.AUDIO_RTF)


def audio_speed_x(df: pd.DataFrame) -> FloatArray:
    """Audio seconds per wall second per request: audio_formulas.audio_speed_x."""
    return of_frame(_framed(df), af.AUDIO_SPEED)


def words_per_s(df: pd.DataFrame) -> FloatArray:
    """Transcript words per second of E2E per request: audio_formulas.words_per_s."""
    return of_frame(_framed(df), af.WORDS_PER_S)


def audio_seconds_per_s(df: pd.DataFrame, completed: BoolArray, window_s: float) -> float:
    """A level's audio throughput: the audio seconds of the ok requests that completed inside
    the window (`completed`, analysis.metrics.completed_in) / the window's seconds."""
    if not window_s > 0 or "audio_ms" not in df.columns:
        return float("nan")
    ok = (df["outcome"] == "ok").to_numpy() & np.asarray(completed, dtype=bool)
    ms = df["audio_ms"].to_numpy(dtype=np.float64)[ok]
    ms = ms[np.isfinite(ms)]
    return float(ms.sum()) / 1000.0 / window_s if ms.size else float("nan")
