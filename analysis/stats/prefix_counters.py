"""The server's own prefix-cache counters, where its /metrics exports them (vLLM's
`vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`, in tokens; older vLLM's
`vllm:gpu_prefix_cache_*`): per level, the counters' increase over the level's steady span
(summed over label sets) and the hit rate = hits / queries. Read from the run's scraped
`server_metrics`; nothing for a run that scraped none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import psycopg

from analysis.stats.server_metrics import level_spans, load_samples

COUNTERS = (
    ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"),
)


def _increase(samples: pd.DataFrame, name: str, t0: pd.Timestamp, t1: pd.Timestamp) -> float:
    """A counter's increase inside [t0, t1], summed over its label sets (last - first)."""
    s = samples[(samples["name"] == name) & (samples["t"] >= t0) & (samples["t"] <= t1)]
    if len(s) < 2:
        return float("nan")
    keys = s["labels"].map(lambda d: tuple(sorted((d or {}).items())))
    total = 0.0
    for _, g in s.groupby(keys.map(str)):
        g = g.sort_values("t")
        total += float(g["value"].iloc[-1] - g["value"].iloc[0])
    return total


def level_prefix_counters(
    conn: psycopg.Connection[Any], run_id: str, df: pd.DataFrame
) -> dict[str, dict[str, Any]]:
    """Per level (key: the level as text): {"metric", "queries", "hits", "hit_rate"} from the
    first counter pair the run scraped; {} when it scraped none."""
    names = [n for pair in COUNTERS for n in pair]
    samples = load_samples(conn, run_id, names)
    if samples.empty:
        return {}
    pair = next((p for p in COUNTERS if (samples["name"] == p[0]).any()), None)
    if pair is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    spans: Mapping[int, tuple[pd.Timestamp, pd.Timestamp]] = level_spans(df)
    for lv, (t0, t1) in sorted(spans.items()):
        q, h = _increase(samples, pair[0], t0, t1), _increase(samples, pair[1], t0, t1)
        if q != q:  # NaN: fewer than two scrapes inside the span
            continue
        out[str(lv)] = {
            "metric": pair[0],
            "queries": q,
            "hits": h if h == h else None,
            "hit_rate": h / q if q > 0 and h == h else None,
        }
    return out
