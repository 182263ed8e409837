"""`n > 1` measured per choice (loadgen/results/choices.py): interleaved choices at a fixed
per-choice gap give that gap as ITL and TPOT, not gap / n; without choices everything is as
before."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import metrics
from loadgen.engine.samples import SAMPLED, sample_metrics
from loadgen.results import choices, formulas
from loadgen.results.records import RequestRecord


def _interleaved(n: int, per_choice: int, gap_us: int) -> tuple[list[int], list[int], list[int]]:
    """n choices, each a token every gap_us, choice c's j-th token at j*gap + c (µs)."""
    offs, toks, chs = [], [], []
    for j in range(per_choice):
        for c in range(n):
            offs.append(1000 + j * gap_us + c)
            toks.append(1)
            chs.append(c)
    return offs, toks, chs


def test_itl_and_tpot_are_per_choice() -> None:
    offs, toks, chs = _interleaved(4, 10, 20_000)
    o, t, c = (np.asarray(x, dtype=np.int64) for x in (offs, toks, chs))
    merged = formulas.itl_per_token_ms(o, t)
    assert float(np.median(merged)) < 1.0  # the bug: gaps across choices
    itl = formulas.itl_per_token_ms(o, t, c)
    assert itl.size == 4 * 9
    assert np.allclose(itl, 20.0)
    assert choices.choice_tpot_ms(o, t, c) == pytest.approx([20.0] * 4)
    assert choices.request_tpot_ms(o, t, c) == pytest.approx(20.0)
    assert choices.tokens_per_choice(t, c) == {0: 10, 1: 10, 2: 10, 3: 10}
    assert choices.n_choices(c) == 4 and choices.n_choices([]) == 1


def test_without_choices_the_single_series_formulas() -> None:
    o = np.asarray([100, 300, 600], dtype=np.int64)
    t = np.asarray([1, 2, 1], dtype=np.int64)
    zeros = np.zeros(3, dtype=np.int64)
    assert not choices.has_choices(zeros) and not choices.has_choices(None)
    assert np.array_equal(formulas.itl_per_token_ms(o, t, zeros), formulas.itl_per_token_ms(o, t))


def test_frame_metrics_per_choice() -> None:
    offs, toks, chs = _interleaved(4, 10, 20_000)
    second = np.asarray([0, 5000, 15000])
    df = pd.DataFrame({
        "chunk_offsets_us": pd.Series([np.asarray(offs), second], dtype=object),
        "chunk_tokens": pd.Series([np.asarray(toks), np.asarray([1, 1, 1])], dtype=object),
        "chunk_choices": pd.Series([np.asarray(chs), None], dtype=object),
        "end_ns": [1e9, 2e7], "first_token_ns": [1e6, 5e6], "output_tokens": [40.0, 3.0],
    })  # fmt: skip
    chunks = metrics.ChunkArrays.from_frame(df)
    itl = metrics.itl_per_token_ms(chunks)
    assert np.allclose(itl[:36], 20.0) and np.allclose(itl[36:], [5.0, 10.0])
    assert np.allclose(metrics.max_itl_ms(chunks), [20.0, 10.0])
    assert np.allclose(metrics.tpot_ms(df), [20.0, (2e7 - 5e6) / 2 / 1e6])


def test_sampled_per_choice() -> None:
    offs, toks, chs = _interleaved(4, 10, 20_000)
    rec = RequestRecord("r", "run", "s", "here", 0, 0, 0, sent_ns=0, first_token_ns=1_000_000,
                        end_ns=200_000_000, output_tokens=40, chunk_offsets_us=offs,
                        chunk_tokens=toks, chunk_choices=chs)  # fmt: skip
    samples: dict[str, list[float]] = {k: [] for k in SAMPLED}
    sample_metrics(samples, rec)
    assert np.allclose(samples["itl_ms"], 20.0) and len(samples["itl_ms"]) == 36
    assert samples["tpot_ms"] == pytest.approx([20.0])


def test_the_run_table_says_n() -> None:
    from analysis.reports.summary_table import render_summary_table

    four = render_summary_table({"run_id": "r" * 8, "choices": 4, "levels": []})
    assert "n = 4" in str(four.title) and "per choice" in str(four.caption)
    one = render_summary_table({"run_id": "r" * 8, "choices": None, "levels": []})
    assert "n =" not in str(one.title) and "per choice" not in str(one.caption)


def test_the_figures_told_to_locust_are_per_choice() -> None:
    from loadgen.locust.engine import request_metrics

    offs, toks, chs = _interleaved(4, 10, 20_000)
    rec = RequestRecord("r", "run", "s", "here", 0, 0, 0, sent_ns=0, first_token_ns=1_000_000,
                        end_ns=200_000_000, output_tokens=40, chunk_offsets_us=offs,
                        chunk_tokens=toks, chunk_choices=chs)  # fmt: skip
    out = request_metrics(rec)
    assert out["tpot"] == pytest.approx(20.0)
    assert len(out["itl"]) == 36 and all(g == pytest.approx(20.0) for g, _ in out["itl"])
