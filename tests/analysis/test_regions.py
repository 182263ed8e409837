"""analysis.stats.regions by hand: server time = TTFT - the region's probe round trip at every
percentile, per-request connection set-up where stored, clock marks, and compare's rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.stats.regions import compare_regions, region_breakdown


def _requests(region: str, ttfts_ms: list[float]) -> pd.DataFrame:
    n = len(ttfts_ms)
    return pd.DataFrame(
        {
            "region": [region] * n,
            "outcome": ["ok"] * n,
            "phase": ["steady"] * n,
            "sent_ns": [1e6] * n,
            "first_token_ns": [1e6 + t * 1e6 for t in ttfts_ms],
            "connect_ns": [2e6] + [np.nan] * (n - 1),  # one new connection, then reuse
        }
    )


def _shards(region: str, rtt_ms: float, unc_ms: float, suspect: bool) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "shard_id": [f"{region}-0"],
            "region": [region],
            "network_rtt_ns": [rtt_ms * 1e6],
            "connect_ns": [rtt_ms * 1e6 + 1e6],
            "clock_offset_ns": [-3e5],
            "clock_uncertainty_ns": [unc_ms * 1e6],
            "clock_suspect": [suspect],
        }
    )


def test_breakdown_by_hand() -> None:
    ttft = [float(x) for x in range(60, 160)]  # 60..159 ms
    (eu,) = region_breakdown(_requests("eu", ttft), _shards("eu", 40.0, 0.2, False))
    assert eu["network_rtt_ms"] == 40.0
    assert eu["ttft_ms"]["p50"] == pytest.approx(np.percentile(ttft, 50))
    assert eu["server_time_ms"]["p50"] == pytest.approx(np.percentile(ttft, 50) - 40.0)
    assert eu["server_time_ms"]["p99"] == pytest.approx(np.percentile(ttft, 99) - 40.0)
    assert eu["connection_setup_ms"] == pytest.approx(41.0)
    assert eu["connection_setup_per_request_ms"]["p50"] == pytest.approx(2.0)
    assert eu["clock_offset_ms"] == [-0.3, -0.3] and eu["clock_suspect_shards"] == []
    (us,) = region_breakdown(_requests("us", ttft), _shards("us", 40.0, 7.0, False))
    assert us["clock_suspect_shards"] == ["us-0"]  # uncertain beyond 5 ms: marked


def test_compare_regions() -> None:
    b = region_breakdown(_requests("eu", [100.0] * 10), _shards("eu", 40.0, 0.2, False))
    c = region_breakdown(_requests("eu", [130.0] * 10), _shards("eu", 40.0, 0.2, False))
    rows = {r["metric"]: r for r in compare_regions(b, c)}
    assert rows["server_time_p50_ms"]["baseline"] == pytest.approx(60.0)
    assert rows["server_time_p50_ms"]["change_pct"] == pytest.approx(50.0)
    assert rows["network_rtt_ms"]["change_pct"] == pytest.approx(0.0)


def test_each_region_of_a_mixed_frame_is_its_rows_alone() -> None:
    """The breakdown masks per-request values computed once over the whole frame: a region's
    entry equals the entry of a frame holding only its steady-phase ok rows, whatever the
    other rows, with the region column categorical (as loaded) or text, and
    server timings reported by some requests only."""
    rng = np.random.default_rng(7)
    parts = []
    for region, rtt in (("eu", 10.0), ("us", 40.0), ("ap", 120.0)):
        part = _requests(region, list(rtt + rng.exponential(30.0, 200)))
        part["outcome"] = np.where(rng.random(200) < 0.1, "http_error", "ok")
        part["phase"] = np.where(rng.random(200) < 0.2, "warmup", "steady")
        part["server_prefill_ms"] = np.where(rng.random(200) < 0.3, np.nan, rng.random(200) * 9)
        part["server_queue_ms"] = np.where(rng.random(200) < 0.5, np.nan, rng.random(200))
        parts.append(part)
    mixed = pd.concat(parts, ignore_index=True).sample(frac=1.0, random_state=3)
    shards = pd.concat([_shards(r, 5.0, 0.2, False) for r in ("eu", "us", "ap", "sa")])
    counted = mixed[(mixed["outcome"] == "ok") & (mixed["phase"] == "steady")]
    alone = {
        r: region_breakdown(counted[counted["region"] == r], shards[shards["region"] == r])[0]
        for r in ("eu", "us", "ap")
    }
    for region_column in (mixed["region"], mixed["region"].astype("category")):
        entries = region_breakdown(mixed.assign(region=region_column), shards)
        assert [e["region"] for e in entries] == ["ap", "eu", "sa", "us"]  # "sa": probes only
        for e in entries:
            if e["region"] == "sa":
                assert e["requests_ok"] == 0 and e["ttft_ms"]["p50"] is None
            else:
                assert e == alone[e["region"]]
