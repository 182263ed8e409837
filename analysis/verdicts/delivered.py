"""Whether each level delivered the load it claims to measure (loadgen/results/shortfall.py's rule,
over stored rows): the shortfall the run summary flags and the exit verdict judges, one
computation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import metrics as m
from loadgen.results.reasons import STOPPED_BY_PEAKLOAD
from loadgen.results.shortfall import concurrency_shortfall, is_short, rate_shortfall
from loadgen.runspec.spec import DEFAULT_MAX_LOAD_SHORTFALL


@dataclass(frozen=True, slots=True)
class Delivered:
    """A level's load: `asked` (rate: the schedule's own arrivals in the steady window, per s;
    concurrency: the configured value), `achieved` (sent req/s of those arrivals; mean in
    flight), the shortfall (None: not judged) and whether it exceeds the bound."""

    level: int
    kind: str
    configured: float
    asked: float | None
    achieved: float | None
    shortfall: float | None
    bound: float
    short: bool
    requests_asked: int = 0  # rate: the steady requests scheduled, and those sent in the window
    requests_sent: int = 0

    def reason(self) -> str:
        what = "sent req/s" if self.kind == "rate" else "mean in flight"
        asked = "the schedule's own arrivals" if self.kind == "rate" else "configured"
        return (
            f"level {self.level}: achieved load short: {what} {self.achieved:.3g} of "
            f"{self.asked:.3g} ({asked}; configured {self.configured:g}), "
            f"{self.shortfall:.1%} short, bound {self.bound:.0%}"
        )


def shortfall_bound(spec: Any) -> float:
    validity = (spec.get("validity") or {}) if isinstance(spec, Mapping) else {}
    return float(validity.get("max_load_shortfall", DEFAULT_MAX_LOAD_SHORTFALL))


def level_delivered(
    level: Mapping[str, Any], df: pd.DataFrame, rows: np.ndarray, spec: Any
) -> Delivered:
    """`level` (a run_levels row) against its own requests (`df` rows where `rows`): the steady
    requests it scheduled vs those sent inside the steady window (rate), or the mean in flight
    vs the configured concurrency (closed loop without think time; with think time, users
    thinking are not in flight, so it is not judged)."""
    load = (spec.get("load") or {}) if isinstance(spec, Mapping) else {}
    bound = shortfall_bound(spec)
    kind = str(level.get("kind"))
    value = float(level.get("value") or 0.0)
    win = m.level_window(level, df, rows)
    times = m.Timeline.from_frame(df)
    asked: float | None = None
    achieved: float | None = None
    short: float | None = None
    n_asked = n_sent = 0
    secs = win.seconds
    if kind == "rate" and secs > 0:
        steady = rows & (df["phase"] == "steady").to_numpy()
        steady &= ~df["error_phase"].isin(tuple(STOPPED_BY_PEAKLOAD)).to_numpy()
        inside = times.sent & (times.sent_at >= win.start_ns) & (times.sent_at < win.end_ns)
        n_asked, n_sent = int(steady.sum()), int((steady & inside).sum())
        asked, achieved = n_asked / secs, n_sent / secs
        short = rate_shortfall(n_asked, n_sent)
    elif kind == "concurrency" and not load.get("think_time_s") and secs > 0:
        asked, achieved = value, m.in_flight_mean(times, win, rows)
        short = concurrency_shortfall(value, achieved)
    return Delivered(
        int(level["level"]),
        kind,
        value,
        asked,
        achieved,
        short,
        bound,
        is_short(short, bound),
        n_asked,
        n_sent,
    )


def pooled(ds: list[Delivered]) -> Delivered:
    """Levels run at one load, pooled as the saturation search pools them (a level it could
    not decide runs again): a rate's counts summed, else the worst level."""
    if len(ds) == 1 or any(d.kind != "rate" for d in ds):
        return max(ds, key=lambda d: -1.0 if d.shortfall is None else d.shortfall)
    asked, sent = sum(d.requests_asked for d in ds), sum(d.requests_sent for d in ds)
    short = rate_shortfall(asked, sent)
    d0 = ds[0]
    return Delivered(
        d0.level, d0.kind, d0.configured, d0.asked, d0.achieved, short, d0.bound,
        is_short(short, d0.bound), asked, sent,
    )  # fmt: skip


def levels_delivered(df: pd.DataFrame, levels: pd.DataFrame | None, spec: Any) -> list[Delivered]:
    """Every level of `levels` (run_levels rows), in order."""
    if levels is None or not len(levels):
        return []
    col = df["level"].to_numpy()
    return [
        level_delivered({str(k): v for k, v in lv.items()}, df, col == int(lv["level"]), spec)
        for lv in levels.sort_values("level").to_dict("records")
    ]
