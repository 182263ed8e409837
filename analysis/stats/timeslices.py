"""Timeslices: one latency metric per N-second window over the whole run (warm-up and cool-down
included, so a drift or a stall shows where it happened). A request belongs to the window of its
send (scheduled_at + sent_ns, wall clock UTC); windows start on the epoch grid the server's series
use (analysis.stats.server_split.bucket_of), so the two share an axis. Unit: the request.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.stats.server_split import bucket_of

QUANTILES = (50.0, 90.0, 99.0)
COLUMNS = ["window", "sent", "ok", "failed", "ok_per_s", "p50_ms", "p90_ms", "p99_ms"]


def timeslices(
    df: pd.DataFrame, metric: str, window_s: float, chunks: m.ChunkArrays | None = None
) -> pd.DataFrame:
    """Per window of `window_s` seconds: requests sent, ok and failed among them, ok/s, and
    `metric`'s p50/p90/p99 (ms, linearly interpolated quantiles over the window's ok requests;
    NaN where none). `metric` is a per-request name of analysis.metrics.per_request_values."""
    if window_s <= 0:
        raise ValueError(f"window_s must be positive (got {window_s})")
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    sent_ns = df["sent_ns"].to_numpy(dtype=np.float64, na_value=np.nan)
    sent = np.isfinite(sent_ns)
    if not sent.any():
        return pd.DataFrame(columns=COLUMNS)
    # whole nanoseconds (stored as integers: exact in a float64), converted as int64: pandas
    # converts a float array value by value (0.9 s at 10M requests, 0.05 s as integers)
    at = df["scheduled_at"] + pd.to_timedelta(np.where(sent, sent_ns, 0.0).astype(np.int64), "ns")
    values = m.per_request_values(df, metric, chunks)
    frame = pd.DataFrame(
        {
            # the array, not to_numpy(): that makes a Timestamp object per request
            "window": bucket_of(at, window_s).array,
            "ok": (df["outcome"] == "ok").to_numpy(),
            "value": np.where(np.isfinite(values), values, np.nan),
        }
    )[sent]
    g = frame.groupby("window", sort=True)
    good = frame[frame["ok"]].groupby("window")["value"]
    out = pd.DataFrame({"sent": g.size(), "ok": g["ok"].sum()})
    out["failed"] = out["sent"] - out["ok"]
    out["ok_per_s"] = out["ok"] / window_s
    for q in QUANTILES:
        out[f"p{q:g}_ms"] = good.quantile(q / 100.0)
    return out.reset_index()[COLUMNS]
