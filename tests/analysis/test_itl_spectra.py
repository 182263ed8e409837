"""analysis.stats.itl_spectra's integer binning (the fast path) gives exactly the spectra of the
general path and of np.percentile of the expanded per-token sample, edge cases included."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import metrics as m
from analysis.stats import grouped, itl_spectra
from analysis.stats import percentiles as pc


def _chunks(dtype: str, rng: np.random.Generator) -> tuple[m.ChunkArrays, np.ndarray]:
    offs: list[np.ndarray] = []
    toks: list[np.ndarray] = []
    big = 2**31 - 2 if dtype == "int32" else 2**40
    for i in range(400):
        n = int(rng.integers(0, 12))  # requests with no chunk or one chunk: no gaps
        gap = rng.integers(0, 20_000, n)
        gap[rng.random(n) < 0.15] = 0  # zero gaps (equal offsets)
        gap[rng.random(n) < 0.05] = -int(rng.integers(1, 500))  # offsets going back
        if i % 37 == 5 and n > 2:
            gap[1] = big // 4  # huge gaps, beyond the linear bins
        o = np.cumsum(gap)
        if dtype == "int64" and i % 5 == 0:
            o -= 2**33  # negative offsets: gaps computed in int64
        offs.append(o)
        toks.append(rng.choice([1, 1, 1, 2, 3, 7], n))  # several tokens: floor(gap / k) keys
    ptr = np.zeros(len(offs) + 1, dtype=np.int64)
    np.cumsum([o.size for o in offs], out=ptr[1:])
    ch = m.ChunkArrays(
        offsets_us=np.concatenate(offs).astype(dtype),
        tokens=np.concatenate(toks).astype(np.int16 if dtype == "int32" else np.int64),
        ptr=ptr,
    )
    labels = rng.integers(-1, 3, len(offs)).astype(np.int32)  # label 3: an empty group
    return ch, labels


@pytest.mark.parametrize("per_chunk", [False, True])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("linear_us", [1 << 16, 64, 1])
def test_integer_bins_equal_general_path_and_numpy(
    monkeypatch: pytest.MonkeyPatch, dtype: str, per_chunk: bool, linear_us: int
) -> None:
    monkeypatch.setattr(grouped, "BLOCK", 1024)  # many blocks and pieces, ragged ends
    monkeypatch.setattr(grouped, "SUB_BLOCK", 100)
    monkeypatch.setattr(itl_spectra, "LINEAR_US", linear_us)
    rng = np.random.default_rng(7 + linear_us)
    ch, labels = _chunks(dtype, rng)
    lo, hi = int(ch.offsets_us.min()), int(ch.offsets_us.max())
    assert itl_spectra._integer_bins(ch, labels, 4, per_chunk, lo, hi) is not None
    sets = {"a": [0], "bc": [1, 2], "all": [0, 1, 2, 3], "empty": [3], "none": []}
    g = pc.tail_grid()
    fast = itl_spectra.itl_group_spectra(ch, labels, 4, sets, g, per_chunk=per_chunk)
    monkeypatch.setattr(itl_spectra, "_integer_bins", lambda *a: None)
    general = itl_spectra.itl_group_spectra(ch, labels, 4, sets, g, per_chunk=per_chunk)
    for name, members in sets.items():
        value, lower, upper, total = fast[name]
        for a, b in zip((value, lower, upper), general[name][:3], strict=True):
            assert np.array_equal(a, b, equal_nan=True), name
        assert total == general[name][3]
        sel = np.isin(labels, members)
        want = m.itl_per_chunk_ms(ch, sel) if per_chunk else m.itl_per_token_ms(ch, sel)
        assert total == want.size
        if total == 0:
            assert np.isnan(value).all()
            continue
        assert np.array_equal(value, np.percentile(want, g)), name
        lo, hi = pc.bootstrap_band(want, g)
        assert np.array_equal(lower, lo) and np.array_equal(upper, hi), name


def test_integer_bins_give_way_to_the_general_path_when_too_many() -> None:
    ch = m.ChunkArrays(
        offsets_us=np.array([0, 2**62], dtype=np.int64),
        tokens=np.ones(2, dtype=np.int64),
        ptr=np.array([0, 2]),
    )
    labels = np.zeros(1, dtype=np.int32)
    assert itl_spectra._integer_bins(ch, labels, 2**20, False, 0, 2**62) is None
