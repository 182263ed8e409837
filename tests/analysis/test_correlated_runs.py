"""The synthetic correlated-run generator (tests/support/correlated_runs.py) is what its docstring
says: the frame and chunks it builds are the ones analysis reads, its closed-form truths match
large samples, and its gaps are correlated within a request."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analysis import metrics as m
from tests.support import correlated_runs as cr


def test_frame_and_chunks_agree_with_the_draw() -> None:
    models = [cr.LevelModel(requests=30, failure_rate=0.2, chunks=(3, 9)),
              cr.LevelModel(requests=20, tokens_per_chunk=3, chunks=(2, 5))]  # fmt: skip
    df, chunks, draws = cr.draw_frame(models, seed=3)
    assert len(df) == 50 and list(np.unique(df["level"])) == [0, 1]
    ok = (df["outcome"] == "ok").to_numpy()
    assert ok.sum() == sum(int(d.ok.sum()) for d in draws) and not ok.all()
    ttft = m.ttft_ms(df)
    want = np.concatenate([d.ttft_ms for d in draws])
    np.testing.assert_allclose(ttft[ok], want[ok])
    itl = m.itl_per_token_ms(chunks, ok)
    np.testing.assert_allclose(np.sort(itl), np.sort(np.concatenate([d.itl_ms() for d in draws])))
    # each ok request: first chunk at its TTFT, offsets increasing
    for r in np.flatnonzero(ok)[:10]:
        offs = df["chunk_offsets_us"].iloc[r]
        assert offs[0] == round(ttft[r] * 1e3) and (np.diff(offs) > 0).all()


def test_ttft_quantile_is_exact_at_the_boundary() -> None:
    model = cr.with_ttft_quantile(cr.LevelModel(requests=200_000, chunks=(2, 2)), 99.0, 800.0)
    assert cr.ttft_exceedance(model, 800.0) == pytest.approx(0.01, rel=1e-12)
    d = cr.draw(model, np.random.default_rng(1))
    # 200,000 iid requests: the sample exceedance is within 4 standard errors of 1 %
    assert abs(np.mean(d.ttft_ms >= 800.0) - 0.01) < 4 * np.sqrt(0.01 * 0.99 / 200_000)


@pytest.mark.parametrize("stalls", [0.0, 0.1])
def test_itl_quantile_closed_form_matches_a_large_sample(stalls: float) -> None:
    base = cr.LevelModel(stall_requests=stalls, stall_rate=0.1, chunks=(100, 200))
    model = cr.with_itl_quantile(base, 99.0, 50.0)
    assert cr.itl_exceedance(model, 50.0) == pytest.approx(0.01, rel=1e-9)
    if not stalls:
        ref = cr.reference_itl_quantile(model, 99.0, requests=20_000, seed=5)
        assert ref == pytest.approx(50.0, rel=0.02)
    # the exceedance fraction of 20,000 requests (its run-to-run sd, measured: about 0.0003)
    big = dataclasses.replace(model, requests=20_000)
    share = np.mean(cr.draw(big, np.random.default_rng(6)).itl_ms() >= 50.0)
    assert abs(share - 0.01) < 0.0015


def test_gaps_are_correlated_within_a_request() -> None:
    model = cr.LevelModel(requests=400, chunks=(100, 100), level_sigma=0.3, within_sigma=0.15)
    d = cr.draw(model, np.random.default_rng(2))
    g, _ = d.gaps_us()
    logs = np.log(g.astype(float)).reshape(400, 99)
    # share of the variance between requests: level_sigma^2 / (level^2 + within^2) = 0.8
    between = logs.mean(axis=1).var()
    assert 0.7 < between / logs.var() < 0.9
    e = logs - logs.mean(axis=1, keepdims=True)
    lag1 = (e[:, 1:] * e[:, :-1]).mean() / (e * e).mean()
    assert lag1 > 0.6  # the AR(1) phi = 0.8, less the bias of centring on a request's mean
    flat = dataclasses.replace(model, level_sigma=0.0, ar_phi=0.0)
    f = np.log(cr.draw(flat, np.random.default_rng(2)).gaps_us()[0].astype(float)).reshape(400, 99)
    assert f.mean(axis=1).var() / f.var() < 0.05
