"""ChunkArrays.tokens_per_request: each request's tokens, summed a block of requests at a time,
equal to summing each request's chunks one by one, whatever the block size, with requests that
have no chunk anywhere (first, between, last) and sums past int16's range."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.metrics import chunks as chunks_module
from analysis.metrics.chunks import ChunkArrays


def brute(ch: ChunkArrays) -> list[int]:
    return [
        int(ch.tokens[ch.ptr[i] : ch.ptr[i + 1]].astype(np.int64).sum())
        for i in range(ch.n_requests)
    ]


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64, 1 << 21])
def test_per_request_sums_equal_one_by_one(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(chunks_module, "SUM_BLOCK", block)
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 6, size=200)
    lengths[[0, 1, 57, 198, 199]] = 0  # no chunks: at the start, inside, at the end
    tokens = [rng.integers(1, 4, size=n).astype(np.int16) for n in lengths]
    tokens[10] = np.full(3, 30_000, dtype=np.int16)  # 90,000 tokens: past int16's range
    lengths[10] = 3
    offsets = [np.arange(n, dtype=np.int32) * 1000 for n in lengths]
    ch = ChunkArrays.from_lists(offsets, tokens)
    ch = ChunkArrays(ch.offsets_us.astype(np.int32), ch.tokens.astype(np.int16), ch.ptr)
    got = ch.tokens_per_request()
    assert got.dtype == np.int64
    assert got.tolist() == brute(ch)
    assert got[10] == 90_000


def test_no_chunks_at_all() -> None:
    ch = ChunkArrays(np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(4, np.int64))
    assert ch.tokens_per_request().tolist() == [0, 0, 0]
