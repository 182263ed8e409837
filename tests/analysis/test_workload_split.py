"""Adapter switches and the prefix arms, from the stored columns: a request after a switch is
one whose shard's previous request (in schedule order) asked another adapter; a retry keeps
its request's kind; TTFT with vs without the shared prefix, with the server's cache hits."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats.workload_split import FIRST, STEADY, SWITCH, prefix_block, switch_kinds


def test_switches_follow_each_shards_schedule_order() -> None:
    df = pd.DataFrame(
        {
            "shard_id": ["s0"] * 5 + ["s1"] * 3,
            "idx": [3, 0, 1, 2, 2, 0, 1, 2],
            "attempt": [0, 0, 0, 0, 1, 0, 0, 0],
            "adapter": ["b", "a", "a", "b", "b", "b", "a", None],
        }
    ).sample(frac=1.0, random_state=1)  # the frame's own order does not matter
    got = dict(
        zip(
            zip(df["shard_id"], df["idx"], df["attempt"], strict=True),
            switch_kinds(df),
            strict=True,
        )
    )
    assert got[("s0", 0, 0)] == FIRST
    assert got[("s0", 1, 0)] == STEADY
    assert got[("s0", 2, 0)] == SWITCH and got[("s0", 2, 1)] == SWITCH  # the retry keeps it
    assert got[("s0", 3, 0)] == STEADY
    assert got[("s1", 0, 0)] == FIRST and got[("s1", 1, 0)] == SWITCH
    assert got[("s1", 2, 0)] == ""  # no adapter


def test_prefix_arms_side_by_side_with_the_servers_cache_hits() -> None:
    n = 40
    with_prefix = np.arange(n) % 2 == 0
    df = pd.DataFrame(
        {
            "outcome": ["ok"] * n,
            "phase": ["steady"] * n,
            "shared_prefix_tokens": np.where(with_prefix, 80.0, 0.0),
            "server_cached_tokens": np.where(with_prefix, 80.0, 0.0),
        }
    )
    ttft = np.where(with_prefix, 100.0, 400.0)
    out = prefix_block(df, ttft, np.ones(n, dtype=bool))
    assert out is not None
    assert out["with"]["ttft_ms"]["p50"] == 100.0 and out["without"]["ttft_ms"]["p50"] == 400.0
    assert out["with"]["hit_share"] == 1.0 and out["without"]["hit_share"] == 0.0
    assert out["with"]["cached_tokens"]["p50"] == 80.0
    assert out["ttft_ratio"] == 0.25
    plain = df.assign(shared_prefix_tokens=np.nan, server_cached_tokens=np.nan)
    assert prefix_block(plain, ttft, np.ones(n, dtype=bool)) is None
