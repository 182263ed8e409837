"""Latency and throughput split by what each request asked of the server's adapters and caches:
per LoRA adapter (`adapter`, deploy/sql/0220), with the adapter-switch cost, and with vs
without the run's shared prefix (`shared_prefix_tokens`) beside the server's own cache hits
(`server_cached_tokens`: llama.cpp's `timings.cache_n`, usage's
`prompt_tokens_details.cached_tokens`). Numbers come from analysis.metrics; the request is the
unit (percentiles exact, numpy linear, over ok steady-phase requests).

Adapter switches: a shard's requests in schedule order (idx; a retry's attempts stay with their
request). A request is `switch` when the request before it in its shard asked another adapter,
`steady` when the same one, `first` when it is its shard's first. Switch cost of an adapter =
p50 TTFT of its `switch` requests - p50 TTFT of its `steady` ones (ms; None without both).
Under concurrency the request before is the one scheduled before, not necessarily finished:
`switch_every = N` makes runs of N, so each switch is a real change of what the server serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis import metrics as m
from analysis.metrics.base import float_column

PCTS = (50.0, 90.0, 99.0)
SWITCH, STEADY, FIRST = "switch", "steady", "first"
DEFINITIONS = {
    "adapters": "per LoRA adapter ([[workload.adapters]]): counts over every phase; "
    "request_rate, output_tokens_per_s over the level's steady window counting that adapter's "
    "requests only; latencies over its ok steady requests; switch_cost_ms = p50 TTFT after a "
    "switch - p50 TTFT of steady requests of the same adapter (a shard's requests in schedule "
    "order: after a switch = the one before asked another adapter)",
    "prefix_cache": "with = requests carrying the run's shared prefix (shared_prefix_tokens > 0), "
    "without = compare_prefix requests of the same length without it; cached_tokens = the "
    "server's own count of prompt tokens served from its cache (llama.cpp timings.cache_n, "
    "usage prompt_tokens_details.cached_tokens), hit_share = share of requests it reported > 0 "
    "for; ttft_ratio = p50 TTFT with / without",
}


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


def pcts(values: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99 of the finite values (None each when there are none)."""
    v = values[np.isfinite(values)]
    if not v.size:
        return {f"p{q:g}": None for q in PCTS}
    got = np.atleast_1d(m.percentile(v, list(PCTS)))
    return {f"p{q:g}": _num(x) for q, x in zip(PCTS, got, strict=True)}


def adapters_of(df: pd.DataFrame) -> list[str]:
    """The adapters a run's requests asked for, sorted; [] for a run without."""
    if "adapter" not in df:
        return []
    col = df["adapter"].dropna()
    return sorted({str(a) for a in col.unique()}) if len(col) else []


def switch_kinds(df: pd.DataFrame) -> np.ndarray:
    """Per request: SWITCH, STEADY, FIRST (see the module docstring) or "" (no adapter)."""
    out = np.full(len(df), "", dtype=object)
    if not adapters_of(df):
        return out
    order = np.lexsort((df["attempt"].to_numpy(), df["idx"].to_numpy(), df["shard_id"].astype(str)))
    shard = df["shard_id"].astype(str).to_numpy()[order]
    adapter = df["adapter"].to_numpy()[order]
    first_attempt = df["attempt"].to_numpy()[order] == 0
    prev_shard: str | None = None
    prev_adapter: Any = None
    kinds = np.full(len(df), "", dtype=object)
    for j in range(len(order)):
        if not isinstance(adapter[j], str):
            continue
        if shard[j] != prev_shard:
            kinds[j] = FIRST
        elif not first_attempt[j]:
            kinds[j] = kinds[j - 1]  # a retry keeps its request's kind
        else:
            kinds[j] = SWITCH if adapter[j] != prev_adapter else STEADY
        prev_shard, prev_adapter = shard[j], adapter[j]
    out[order] = kinds
    return out


def adapter_blocks(
    df: pd.DataFrame,
    per_request: Mapping[str, np.ndarray],
    kinds: np.ndarray,
    times: m.Timeline,
    arrivals: m.Arrivals,
    win: m.Window,
    rows: np.ndarray,
    scope: np.ndarray,
) -> dict[str, dict[str, Any]] | None:
    """One level's numbers per adapter (`rows`: the level's requests; throughput counts the
    adapter's requests of `scope`, as analysis.reports.summary's); None without adapters.
    `per_request` holds the per-request metric arrays by name (ttft_ms, tpot_ms, e2e_ms)."""
    names = adapters_of(df)
    if not names:
        return None
    adapter = df["adapter"].to_numpy()
    ok = (df["outcome"] == "ok").to_numpy()
    steady = (df["phase"] == "steady").to_numpy()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = adapter == name
        sel = rows & mine
        if not sel.any():
            continue
        lat = sel & ok & steady
        block: dict[str, Any] = {
            "requests_ok": int((sel & ok).sum()),
            "requests_failed": int((sel & ~ok).sum()),
            "request_rate": _num(m.request_rate(times, win, scope & mine)),
            "output_tokens_per_s": _num(m.output_token_rate(arrivals, win, scope & mine)),
        }
        for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
            block[metric] = pcts(per_request[metric][lat])
        ttft = per_request["ttft_ms"]
        after, same = lat & (kinds == SWITCH), lat & (kinds == STEADY)
        a50 = pcts(ttft[after])["p50"]
        s50 = pcts(ttft[same])["p50"]
        block["switch"] = {
            "switches": int((sel & (kinds == SWITCH)).sum()),
            "ttft_after_switch_ms": pcts(ttft[after]),
            "ttft_steady_ms": pcts(ttft[same]),
            "n_after_switch": int(np.isfinite(ttft[after]).sum()),
            "n_steady": int(np.isfinite(ttft[same]).sum()),
            "switch_cost_ms": None if a50 is None or s50 is None else a50 - s50,
        }
        out[name] = block
    return out


def prefix_block(df: pd.DataFrame, ttft: np.ndarray, rows: np.ndarray) -> dict[str, Any] | None:
    """One level's TTFT with vs without the shared prefix and the server's cache hits; None
    when the run has no shared prefix and the server reported no cached tokens."""
    shared = float_column(df, "shared_prefix_tokens") if "shared_prefix_tokens" in df else None
    cached = float_column(df, "server_cached_tokens")
    if (shared is None or not np.isfinite(shared).any()) and not np.isfinite(cached).any():
        return None
    ok = (df["outcome"] == "ok").to_numpy()
    steady = (df["phase"] == "steady").to_numpy()
    lat = rows & ok & steady
    arms: dict[str, np.ndarray] = {"all": lat}
    if shared is not None and np.isfinite(shared).any():
        arms = {"with": lat & (shared > 0), "without": lat & (shared == 0)}
    out: dict[str, Any] = {}
    for arm, sel in arms.items():
        if not sel.any():
            continue
        reported = sel & np.isfinite(cached)
        c = cached[reported]
        planned = shared[sel & np.isfinite(shared)] if shared is not None else np.empty(0)
        out[arm] = {
            "requests": int(sel.sum()),
            "ttft_ms": pcts(ttft[sel]),
            "shared_prefix_tokens": _num(planned.mean()) if planned.size else None,
            "cache_reported": int(reported.sum()),
            "cached_tokens": pcts(c),
            "cached_tokens_mean": _num(c.mean()) if c.size else None,
            "hit_share": _num((c > 0).mean()) if c.size else None,
        }
    w, wo = out.get("with"), out.get("without")
    if w and wo and w["ttft_ms"]["p50"] and wo["ttft_ms"]["p50"]:
        out["ttft_ratio"] = _num(w["ttft_ms"]["p50"] / wo["ttft_ms"]["p50"])
    return out or None
