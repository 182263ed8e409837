"""The speech workloads' part of the run summary (analysis.reports.summary): per level (and
region) the time to first audio byte, the real-time factor, audio seconds per wall second,
transcript words per second, the gaps between audio chunks, the audio delivered and the level's
audio throughput; and its terminal table. Absent (None) for a run without audio."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from rich.table import Table

from analysis import metrics as m
from analysis.metrics import audio
from loadgen.results import audio_formulas as af

AUDIO_METRICS = ("ttfab_ms", "audio_rtf", "audio_speed_x", "words_per_s")
DEFINITIONS = {
    **{f.name: f.definition for f in af.AUDIO_FORMULAS},
    "audio_s": "seconds of audio of the ok steady requests (speech out: decoded from the "
    "response's bytes; speech in: the uploads' lengths)",
    "audio_s_per_s": "audio seconds of the ok requests that completed inside the steady window "
    "/ window: speech out, audio delivered per wall second; speech in, audio transcribed",
    "chunk_gap_ms": "speech out: the gaps between audio chunks (a chunk is one read of audio "
    "bytes or one speech.audio.delta), the run's per-token ITL with one chunk a token",
}


class AudioValues:
    """Per-request audio arrays of the whole frame, computed once (None when no audio)."""

    def __init__(self, df: pd.DataFrame) -> None:
        self.per_request = {name: m.per_request_values(df, name) for name in AUDIO_METRICS}
        self.audio_ms = df["audio_ms"].to_numpy(dtype=np.float64)

    @staticmethod
    def of(df: pd.DataFrame) -> AudioValues | None:
        return AudioValues(df) if audio.has_audio(df) else None


def audio_block(
    a: AudioValues,
    df: pd.DataFrame,
    lat: np.ndarray,
    completed: np.ndarray,
    window_s: float,
    itl_ms: Mapping[str, Any],
    pcts: Any,
    num: Any,
) -> dict[str, Any]:
    """One level's (or region's) audio figures: `lat` selects its ok steady requests,
    `completed` those that completed inside its steady window; `itl_ms` its per-token ITL
    percentiles (with one chunk a token: the gaps between audio chunks)."""
    out: dict[str, Any] = {name: pcts(a.per_request[name][lat]) for name in AUDIO_METRICS}
    ms = a.audio_ms[lat]
    out["audio_s"] = num(float(ms[np.isfinite(ms)].sum()) / 1000.0)
    out["audio_s_per_s"] = num(audio.audio_seconds_per_s(df, completed, window_s))
    out["chunk_gap_ms"] = dict(itl_ms)
    out["samples"] = int(np.isfinite(a.per_request["audio_rtf"][lat]).sum())
    return out


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _trio(p: Mapping[str, Any], digits: int = 1) -> str:
    return " / ".join(_fmt(p.get(k), digits) for k in ("p50", "p90", "p99"))


def render_audio_table(summary: Mapping[str, Any]) -> Table | None:
    """The audio figures per level, or None when the run has no audio."""
    levels = [lv for lv in summary.get("levels", []) if lv.get("audio")]
    if not levels:
        return None
    t = Table(
        title="audio",
        caption="p50 / p90 / p99 (steady phase, ok requests); TTFAB from send; RTF = E2E / "
        "audio length (< 1: faster than real time); audio x: audio s per wall s; audio s/s: "
        "audio of the requests completed in the steady window per second",
    )
    for head in ("level", "TTFAB ms", "RTF", "audio x", "chunk gap ms", "words/s", "audio s",
                 "audio s/s"):  # fmt: skip
        t.add_column(head, justify="right")
    for lv in levels:
        a = lv["audio"]
        t.add_row(
            str(lv["level"]),
            _trio(a["ttfab_ms"]),
            _trio(a["audio_rtf"], 3),
            _trio(a["audio_speed_x"], 2),
            _trio(a["chunk_gap_ms"]),
            _trio(a["words_per_s"]),
            _fmt(a["audio_s"]),
            _fmt(a["audio_s_per_s"], 2),
        )
    return t
