"""The Runs page's data: the table of stored runs (the list itself: ui.data.shared.runs)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ui.data import shared


def runs_table(df: pd.DataFrame, since: Any = None, until: Any = None) -> pd.DataFrame:
    """The Runs page's table: one row per run, labels as `k=v` text, validity as a word."""
    out = pd.DataFrame(
        {
            "run_id": df["run_id"],
            "name": df["name"],
            "target": df["target_url"],
            "model": df["model"],
            "labels": [_labels_text(x) for x in df["labels"]],
            "preset": df["preset"],
            "launched_by": df["launched_by"],
            "tags": [", ".join(t) if isinstance(t, list) else "" for t in df["tags"]],
            "start": df["started_at"],
            "duration_s": df["duration_s"],
            "status": df["status"],
            "validity": [shared.validity_word(v) for v in df["valid"]],
            "requests": df["requests"],
            "errors": df["errors"],
        }
    )
    if since is not None:
        out = out[out["start"].isna() | (out["start"].dt.date >= since)]
    if until is not None:
        out = out[out["start"].isna() | (out["start"].dt.date <= until)]
    return out.reset_index(drop=True)


def _labels_text(labels: Any) -> str:
    if not isinstance(labels, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if v not in (None, {}, ""))
