"""Percentile spectra: exact selection equals np.percentile; bootstrap bands agree with a
brute-force bootstrap; curves pool regions and split them."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.stats import percentiles as pc
from tests.analysis.storedata import frame, streamed

RUN = "00000000-0000-0000-0000-0000000000f1"


def test_grid_is_the_log_tail() -> None:
    g = pc.tail_grid()
    assert g[0] == 0.0 and g[-1] == pytest.approx(99.99)
    for mark in (50.0, 90.0, 99.0, 99.9):
        assert np.isclose(g, mark).any()
    assert pc.tail_x([0, 90, 99])[1:].tolist() == pytest.approx([10.0, 100.0])


@pytest.mark.parametrize("kind", ["lognormal", "integers", "ties"])
def test_selection_equals_numpy(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(pc, "_SELECT_MIN", 1000)  # force the O(n) path on a small array
    monkeypatch.setattr(pc, "_BLOCK", 4096)
    rng = np.random.default_rng(7)
    v = {
        "lognormal": rng.lognormal(3, 1, 50_001),
        "integers": rng.integers(0, 300, 50_000).astype(float),
        "ties": np.r_[np.zeros(40_000), rng.random(13)],
    }[kind]
    g = pc.tail_grid()
    assert np.array_equal(pc.exact_percentiles(v, g), np.percentile(v, g))
    small = v[:999]  # below the threshold: one sort shared with the bootstrap
    assert np.array_equal(pc.spectrum(small, g, resamples=10)["value"], np.percentile(small, g))
    lo, hi = pc.bootstrap_band(small, g, resamples=10)
    band = pc.spectrum(small, g, resamples=10)
    assert np.array_equal(band["lower"], lo) and np.array_equal(band["upper"], hi)
    ranks = np.array([0, 5, 25_000, v.size - 1, 5])
    assert np.array_equal(pc.order_statistics(v, ranks), np.sort(v)[ranks])
    for part in (v, v[:1], v[:2], v[:999]):  # sorted already: the same numbers, no sort
        assert np.array_equal(pc.sorted_percentiles(np.sort(part), g), np.percentile(part, g))
    assert np.isnan(pc.sorted_percentiles(np.zeros(0), g)).all()


@pytest.mark.parametrize("exact", [True, False])
def test_bootstrap_band_matches_brute_force(exact: bool) -> None:
    rng = np.random.default_rng(3)
    v = rng.exponential(100.0, 2000)
    q = np.array([50.0, 90.0, 99.0])
    lo, hi = pc.bootstrap_band(v, q, resamples=4000, seed=1, exact=exact)
    boots = np.percentile(v[rng.integers(0, v.size, (4000, v.size))], q, axis=1).T
    blo, bhi = np.quantile(boots, 0.025, axis=0), np.quantile(boots, 0.975, axis=0)
    # same distribution up to Monte Carlo noise and interpolation: within 5% of the value
    point = np.percentile(v, q)
    assert np.all(np.abs(lo - blo) < 0.05 * point) and np.all(np.abs(hi - bhi) < 0.05 * point)
    assert np.all(lo <= point) and np.all(point <= hi)
    # seeded: same numbers again
    lo2, hi2 = pc.bootstrap_band(v, q, resamples=4000, seed=1, exact=exact)
    assert np.array_equal(lo, lo2) and np.array_equal(hi, hi2)


def test_exact_band_is_the_limit_of_the_monte_carlo_band() -> None:
    # the exact band takes the Beta quantiles the Monte Carlo replicates estimate: with many
    # replicates the two agree to within a rank or two
    rng = np.random.default_rng(5)
    v = np.sort(rng.lognormal(3, 1, 5000))
    q = pc.tail_grid()
    lo, hi = pc.bootstrap_band(v, q)
    mlo, mhi = pc.bootstrap_band(v, q, resamples=40_000, seed=2, exact=False)
    rank = np.searchsorted
    for exact_end, mc_end in ((lo, mlo), (hi, mhi)):
        assert np.all(np.abs(rank(v, exact_end) - rank(v, mc_end)) <= 2)
    point = np.percentile(v, q)
    assert np.all(lo <= point) and np.all(point <= hi)
    # a band is two order statistics: exactly the ranks band_ranks names
    r = pc.band_ranks(v.size, q, 0.95)
    assert np.array_equal(lo, v[r[0]]) and np.array_equal(hi, v[r[1]])


def test_curves_pool_and_split_regions() -> None:
    rows = [
        streamed(
            RUN,
            i,
            sent_ns=0,
            offsets_us=[1000 * (10 + i), 1000 * (20 + i)],
            tokens=[1, 1],
            region="eu" if i < 10 else "us",
        )
        for i in range(20)
    ]
    curves = pc.percentile_curves(frame(rows), resamples=200)
    ttft = curves[curves["metric"] == "ttft_ms"]
    assert set(ttft["region"]) == {"all", "eu", "us"}
    pooled = ttft[(ttft["region"] == "all") & (ttft["percentile"] == 50.0)]
    assert pooled["value"].item() == 19.5  # TTFTs 10..29 ms: median of all, not of medians
    eu = ttft[(ttft["region"] == "eu") & (ttft["percentile"] == 100 * (1 - 10**-0.0))]
    assert eu["value"].item() == 10.0  # p0
    itl = curves[(curves["metric"] == "itl_ms") & (curves["region"] == "all")]
    assert (itl["value"] == 10.0).all() and (itl["n"] == 20).all()


@pytest.mark.parametrize("zero_token_chunks", [False, True])
def test_itl_curves_equal_expanded_samples(zero_token_chunks: bool) -> None:
    from analysis import metrics as m

    rng = np.random.default_rng(12)
    rows = []
    for i in range(120):
        n = int(rng.integers(1, 9))
        offs = np.cumsum(rng.integers(1, 9000, n)).tolist()
        toks = rng.integers(0 if zero_token_chunks else 1, 4, n).tolist()
        toks[0] = 1
        rows.append(
            streamed(
                RUN,
                i,
                sent_ns=0,
                offsets_us=offs,
                tokens=toks,
                level=i % 2,
                region=("eu", "us", "ap")[i % 3],
                outcome="ok" if i % 11 else "stream_error",
            )
        )
    df = frame(rows)
    curves = pc.percentile_curves(df, metrics=("itl_ms",), resamples=50)
    ch = m.ChunkArrays.from_frame(df)
    ok = (df["outcome"] == "ok").to_numpy()
    for (lvl, region), got in curves.groupby(["level", "region"]):
        sel = ok & (df["level"] == lvl).to_numpy()
        if region != "all":
            sel &= (df["region"] == region).to_numpy()
        want = np.percentile(m.itl_per_token_ms(ch, sel), got["percentile"])
        assert np.array_equal(got["value"].to_numpy(), want), (lvl, region)
